// The trd_rt table: the only functions generated code can call. Each catches every C++ exception at
// the boundary (generated code is C) and turns it into f->error naming the op, so one failing call
// becomes one Python exception and the module stays usable.
#include <c10/util/Exception.h>

#include <cstring>

#include "runtime/aten/item_value.h"
#include "runtime/graphs/scalar_patch.h"
#include "runtime/graphs/spec_graphs.h"
#include "runtime/module/loaded_module.h"

namespace trident::runtime {
namespace {

using Kind = trd_frame::ErrorKind;

// The Python type eager's op raises for this c10 error (torch/csrc/Exceptions.h maps the same way).
Kind kind_of(const c10::Error& e) {
  if (dynamic_cast<const c10::IndexError*>(&e)) return Kind::kIndex;
  if (dynamic_cast<const c10::ValueError*>(&e)) return Kind::kValue;
  if (dynamic_cast<const c10::TypeError*>(&e)) return Kind::kType;
  if (dynamic_cast<const c10::NotImplementedError*>(&e)) return Kind::kNotImplemented;
  return Kind::kRuntime;
}

// A patch run's refusal (scalar_patch.h) as the run's error: the caller reads the refusal itself.
int refused(trd_frame* f) {
  f->error = "graph patch refused: " + f->patch->refusal();
  return 1;
}

int rt_call(trd_frame* f, int32_t site, const int64_t* dyn) {
  const AtenSite& s = f->spec->aten_site(site);
  try {
    if (f->patch && f->patch->patching()) return f->patch->patch_call(site, s, *f, dyn) ? 0 : refused(f);
    s.invoke(*f, dyn);
    if (f->patch) f->patch->record_call(site, s, *f, dyn);
    return 0;
  } catch (const c10::Error& e) {
    f->error = s.name + ": " + e.what_without_backtrace();
    f->error_kind = kind_of(e);
  } catch (const std::exception& e) {
    f->error = s.name + ": " + e.what();
  }
  return 1;
}

int rt_launch(trd_frame* f, int32_t site, const uint32_t* grid, const int64_t* dyn, const double*) {
  const LaunchSite& s = f->spec->launch_site(site);
  try {
    const KernelInfo& k = f->spec->kernel(s.kernel);
    if (f->patch && f->patch->patching()) return f->patch->patch_launch(site, s, k, *f, grid, dyn) ? 0 : refused(f);
    if (!f->patch) {
      s.launch(*f, k, grid, dyn);
      return 0;
    }
    c10::SmallVector<uint64_t, 16> slots;
    void* stream = s.launch(*f, k, grid, dyn, &slots);
    f->patch->record_launch(site, k, slots, grid, static_cast<CUstream>(stream));
    return 0;
  } catch (const c10::Error& e) {
    f->error = "Triton kernel " + s.name + ": " + e.what_without_backtrace();
    f->error_kind = kind_of(e);
  } catch (const std::exception& e) {
    f->error = "Triton kernel " + s.name + ": " + e.what();
  }
  return 1;
}

void rt_release(trd_frame* f, int32_t slot) { f->slots[slot].reset(); }

// Generated code names the Python exception it stands for as "Kind: message" (trident_abi.h).
int rt_fail(trd_frame* f, const char* message) {
  static const struct { const char* prefix; Kind kind; } kinds[] = {
      {"ZeroDivisionError: ", Kind::kZeroDivision}, {"ValueError: ", Kind::kValue},
      {"OverflowError: ", Kind::kOverflow}, {TRD_BRANCH_MISS, Kind::kBranchMiss}};
  f->error = message;
  f->error_kind = Kind::kRuntime;
  for (const auto& k : kinds) {
    if (f->error.rfind(k.prefix, 0) == 0) {
      f->error = f->error.substr(std::strlen(k.prefix));
      f->error_kind = k.kind;
    }
  }
  return 1;
}

const at::Tensor* tensor_of(const trd_frame* f, int32_t kind, int32_t index) {
  if (kind == 0) return index < f->nargs ? f->args[index] : nullptr;
  if (kind == 1) return index < f->nstate ? &f->state[index] : nullptr;
  return &f->slots[index];
}

// A host read. In a graph's patch it refuses, but in the walk of a graph in segments (scalar_patch.h)
// it gives the recorded value, or the one the replay read; in a capture in segments it ends one
// (spec_graphs.h); in a plain run the value is noted for the spec's next capture.
int rt_item(trd_frame* f, int32_t kind, int32_t index, int32_t as_float, int64_t* out) {
  if (f->patch && f->patch->patching()) {
    if (f->patch->walking()) return f->patch->walk_read(*f, out) ? 0 : refused(f);
    f->patch->refuse("the program reads a device value on the host");
    return refused(f);
  }
  const at::Tensor* t = tensor_of(f, kind, index);
  try {
    TORCH_CHECK(t && t->defined(), "item: no tensor at location ", kind, ":", index);
    if (in_graph_capture()) {
      std::string why;
      if (capture_host_read(*f, *t, as_float != 0, out, &why)) return 0;
      f->error = why;
      return 1;
    }
    *out = item_value(*t, as_float != 0);
    if (f->spec) f->spec->graphs().note_read(*out);
    return 0;
  } catch (const c10::Error& e) {
    f->error = std::string("Tensor.item(): ") + e.what_without_backtrace();
    f->error_kind = kind_of(e);
  } catch (const std::exception& e) {
    f->error = std::string("Tensor.item(): ") + e.what();
  }
  return 1;
}

int rt_dim(trd_frame* f, int32_t kind, int32_t index, int32_t which, int32_t d, int64_t* out) {
  const at::Tensor* t = tensor_of(f, kind, index);
  if (!t || !t->defined() || d < 0 || d >= t->dim()) return rt_fail(f, "trident internal error: size of a missing dimension");
  *out = which == 1 ? t->stride(d) : t->size(d);
  return 0;
}

const trd_rt kTable = {TRD_ABI_VERSION, sizeof(trd_rt), rt_call, rt_launch, rt_release, rt_fail, rt_item, rt_dim};

}  // namespace

const trd_rt* runtime_table() { return &kTable; }

}  // namespace trident::runtime
