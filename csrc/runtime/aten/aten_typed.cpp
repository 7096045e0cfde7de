// Typed entry points for the hottest ATen ops: at::_ops::<op>::call with arguments taken straight
// from the frame, skipping IValue boxing. Chosen per site at load time, only when every operand
// has the plan the typed call expects; anything else stays on the boxed path, which serves all ops.
#include <ATen/Context.h>
#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <ATen/ops/add_ops.h>
#include <ATen/ops/empty_like_ops.h>
#include <ATen/ops/empty_ops.h>
#include <ATen/ops/mul_ops.h>
#include <ATen/ops/view_ops.h>
#include <ATen/ops/_unsafe_view_ops.h>
#include <ATen/ops/copy_ops.h>
#include <ATen/ops/expand_ops.h>
#include <ATen/ops/permute_ops.h>
#include <ATen/ops/reshape_ops.h>
#include <ATen/ops/select_ops.h>
#include <ATen/ops/slice_ops.h>
#include <ATen/ops/t_ops.h>
#include <ATen/ops/transpose_ops.h>
#include <ATen/ops/unsqueeze_ops.h>

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstring>
#include <optional>

#include "runtime/aten/aten_site.h"
#include "runtime/gemm/aten_typed_gemm.h"
#include "runtime/gemm/lt_gemm.h"
#include "runtime/module/loaded_module.h"
#include "runtime/aten/typed_produce.h"

namespace trident::runtime {
namespace {

using typed::P;
using typed::produce;
using typed::push_device;
using typed::reuse_or_allocate;
using typed::mm;
using typed::bmm;
using typed::addmm;
using typed::linear;

bool plans_are_from(const AtenSite& s, size_t first, std::initializer_list<P> kinds) {
  if (s.args.size() != first + kinds.size()) return false;
  size_t k = first;
  for (P want : kinds)
    if (s.args[k++].kind != want) return false;
  return true;
}

bool plans_are(const AtenSite& s, std::initializer_list<P> kinds) {
  if (s.args.size() != kinds.size()) return false;
  size_t k = 0;
  for (P want : kinds)
    if (s.args[k++].kind != want) return false;
  return true;
}

// Elementwise a (op) b: the result's layout follows the inputs' sizes and strides, its dtype their
// promotion (wrapped numbers promote differently from 0-dim tensors).
ReusePool::Key binary_key(const at::Tensor& a, const at::Tensor& b) {
  ReusePool::Key key;
  for (const at::Tensor* t : {&a, &b}) {
    key.push_back(t->dim());
    key.append(t->sizes().begin(), t->sizes().end());
    key.append(t->strides().begin(), t->strides().end());
    key.push_back(t->unsafeGetTensorImpl()->is_wrapped_number());
    push_device(key, *t);
  }
  return key;
}

void add_tensor(const AtenSite& s, trd_frame& f, const int64_t*) {
  const at::Tensor& a = s.tensor(f, 0);
  const at::Tensor& b = s.tensor(f, 1);
  const c10::Scalar alpha = s.args[2].constant.toScalar();
  produce(s, f, binary_key(a, b), [&] { return at::_ops::add_Tensor::call(a, b, alpha); },
          [&](at::Tensor& out) { at::_ops::add_out::call(a, b, alpha, out); });
}
void mul_tensor(const AtenSite& s, trd_frame& f, const int64_t*) {
  const at::Tensor& a = s.tensor(f, 0);
  const at::Tensor& b = s.tensor(f, 1);
  produce(s, f, binary_key(a, b), [&] { return at::_ops::mul_Tensor::call(a, b); },
          [&](at::Tensor& out) { at::_ops::mul_out::call(a, b, out); });
}
void view_const(const AtenSite& s, trd_frame& f, const int64_t*) {
  // The size list is a constant IValue built at load; toIntVector is a small copy, no boxing.
  const auto sizes = s.args[1].constant.toIntList();
  c10::SmallVector<c10::SymInt, 6> sym;
  for (int64_t v : sizes) sym.emplace_back(v);
  s.set_result(f, 0, at::_ops::view::call(s.tensor(f, 0), sym));
}

template <typename T>
std::optional<T> opt_enum(const c10::IValue& v) {
  return v.isNone() ? std::nullopt : std::optional<T>(static_cast<T>(v.toInt()));
}
std::optional<c10::Device> opt_device(const c10::IValue& v) {
  return v.isNone() ? std::nullopt : std::optional<c10::Device>(v.toDevice());
}
std::optional<bool> opt_bool(const c10::IValue& v) {
  return v.isNone() ? std::nullopt : std::optional<bool>(v.toBool());
}

// torch.use_deterministic_algorithms(True) makes ATen fill new memory (NaN for floats), so a read of
// uninitialized memory shows; a reused buffer would hold the last call's data instead.
bool fills_uninitialized() {
  const auto& ctx = at::globalContext();
  return ctx.deterministicAlgorithms() && ctx.deterministicFillUninitializedMemory();
}

// torch.empty_like of a dense, non-overlapping strided tensor on the CPU or the current CUDA
// device, with no option but the dtype: exactly what ATen's empty_like does for it (empty_strided
// with the template's sizes and strides, whose CPU and CUDA kernels call these same functions),
// without its two dispatcher calls. Anything else returns an undefined tensor
// and the caller takes the dispatcher. Not for torch.use_deterministic_algorithms' fill (the caller).
at::Tensor empty_like_fast(const AtenSite& s, const at::Tensor& like) {
  const auto& a = s.args;
  // (Named tensors, whose names empty_like would copy, never reach a site: export rejects them.)
  if (like.layout() != c10::kStrided || !like.is_non_overlapping_and_dense() || like.is_quantized()) return {};
  if (!a[1].constant.isNone() && !a[1].constant.isInt()) return {};
  if (!a[2].constant.isNone() && static_cast<c10::Layout>(a[2].constant.toInt()) != c10::kStrided) return {};
  if (!a[3].constant.isNone() && !(a[3].constant.isDevice() && a[3].constant.toDevice() == like.device())) return {};
  if (!a[4].constant.isNone() && a[4].constant.toBool()) return {};
  if (!a[5].constant.isNone() && static_cast<c10::MemoryFormat>(a[5].constant.toInt()) != c10::MemoryFormat::Preserve)
    return {};
  const at::ScalarType dtype =
      a[1].constant.isNone() ? like.scalar_type() : static_cast<at::ScalarType>(a[1].constant.toInt());
  const c10::DeviceType type = like.device().type();
  if (type == c10::DeviceType::CUDA) {
    if (c10::impl::getDeviceGuardImpl(type)->getDevice() != like.device()) return {};
    return at::detail::empty_strided_generic(like.sizes(), like.strides(), c10::GetAllocator(type),
                                             c10::DispatchKeySet(c10::DispatchKey::CUDA), dtype);
  }
  if (type == c10::DeviceType::CPU) return at::detail::empty_strided_cpu(like.sizes(), like.strides(), dtype);
  return {};
}

// Allocation before a Triton kernel is the commonest op of all: skip the boxed path for it, and
// hand out last call's buffer again when nothing else can see it (buffer_reuse.h).
void empty_like(const AtenSite& s, trd_frame& f, const int64_t*) {
  const auto& a = s.args;
  const at::Tensor& like = s.tensor(f, 0);
  // The result's metadata is a function of the template's sizes and strides and the constants.
  ReusePool::Key key(like.sizes().begin(), like.sizes().end());
  key.append(like.strides().begin(), like.strides().end());
  push_device(key, like);
  const bool fill = fills_uninitialized();
  reuse_or_allocate(
      s, f, key, !fill,
      [&] {
        at::Tensor t = fill ? at::Tensor() : empty_like_fast(s, like);
        if (t.defined()) return t;
        return at::_ops::empty_like::call(like, opt_enum<at::ScalarType>(a[1].constant),
                                          opt_enum<at::Layout>(a[2].constant), opt_device(a[3].constant),
                                          opt_bool(a[4].constant), opt_enum<at::MemoryFormat>(a[5].constant));
      },
      [](at::Tensor&) {});
}
// torch.empty on the current CUDA device, contiguous, strided: exactly what ATen's CUDA empty does
// after its dispatch and option handling (empty_cuda -> empty_generic with the CUDA caching
// allocator), without them. Anything else, or another device than the current one, returns an
// undefined tensor and the caller takes the dispatcher.
at::Tensor cuda_empty_fast(const AtenSite& s, c10::IntArrayRef sizes) {
  const auto& a = s.args;
  if (!a[1].constant.isInt() || !a[3].constant.isDevice()) return {};
  const c10::Device d = a[3].constant.toDevice();
  if (d.type() != c10::DeviceType::CUDA) return {};
  if (!a[2].constant.isNone() && static_cast<c10::Layout>(a[2].constant.toInt()) != c10::kStrided) return {};
  if (!a[4].constant.isNone() && a[4].constant.toBool()) return {};
  if (!a[5].constant.isNone() && static_cast<c10::MemoryFormat>(a[5].constant.toInt()) != c10::MemoryFormat::Contiguous)
    return {};
  auto* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  if (d.has_index() && impl->getDevice() != d) return {};
  return at::detail::empty_generic(sizes, c10::GetAllocator(c10::DeviceType::CUDA),
                                   c10::DispatchKeySet(c10::DispatchKey::CUDA),
                                   static_cast<at::ScalarType>(a[1].constant.toInt()), std::nullopt);
}

void empty_memory_format(const AtenSite& s, trd_frame& f, const int64_t* dyn) {
  const auto& a = s.args;
  ReusePool::Key key;
  if (a[0].kind == P::Const) {
    for (int64_t v : a[0].constant.toIntList()) key.push_back(v);
  } else {
    for (const auto& it : a[0].items) key.push_back(it.kind == ir::Operand::Kind::Sym ? dyn[it.i] : it.i);
  }
  const size_t rank = key.size();
  if (a[3].constant.isDevice()) {  // "cuda" without an index allocates on the current device
    const c10::Device d = a[3].constant.toDevice();
    if (!d.has_index() && !d.is_cpu()) key.push_back(c10::impl::getDeviceGuardImpl(d.type())->getDevice().index());
  }
  const bool fill = fills_uninitialized();
  const c10::IntArrayRef sizes(key.data(), rank);
  reuse_or_allocate(
      s, f, key, !fill,
      [&] {
        at::Tensor t = fill ? at::Tensor() : cuda_empty_fast(s, sizes);
        if (t.defined()) return t;
        return at::_ops::empty_memory_format::call(
            c10::fromIntArrayRefSlow(sizes), opt_enum<at::ScalarType>(a[1].constant), opt_enum<at::Layout>(a[2].constant),
            opt_device(a[3].constant), opt_bool(a[4].constant), opt_enum<at::MemoryFormat>(a[5].constant));
      },
      [](at::Tensor&) {});
}

// An int operand (constant or runtime) and an int list operand (constant or with runtime items).
bool is_int(const ArgPlan& p) { return p.kind == P::Sym || (p.kind == P::Const && p.constant.isInt()); }
bool is_int_list(const ArgPlan& p) { return p.kind == P::IntList || (p.kind == P::Const && p.constant.isIntList()); }
int64_t int_at(const AtenSite& s, size_t k, const int64_t* dyn) { return s.integer(k, dyn); }
c10::SmallVector<c10::SymInt, 6> sym_list(const AtenSite& s, size_t k, const int64_t* dyn) {
  c10::SmallVector<c10::SymInt, 6> out;
  const ArgPlan& p = s.args[k];
  if (p.kind == P::Const) {
    for (int64_t v : p.constant.toIntList()) out.emplace_back(v);
  } else {
    for (const auto& it : p.items) out.emplace_back(it.kind == ir::Operand::Kind::Sym ? dyn[it.i] : it.i);
  }
  return out;
}
c10::SmallVector<int64_t, 6> int_list(const AtenSite& s, size_t k, const int64_t* dyn) {
  c10::SmallVector<int64_t, 6> out;
  for (const auto& v : sym_list(s, k, dyn)) out.push_back(v.as_int_unchecked());
  return out;
}
std::optional<c10::SymInt> opt_sym(const AtenSite& s, size_t k, const int64_t* dyn) {
  const ArgPlan& p = s.args[k];
  if (p.kind == P::Const && p.constant.isNone()) return std::nullopt;
  return c10::SymInt(int_at(s, k, dyn));
}

void slice(const AtenSite& s, trd_frame& f, const int64_t* dyn) {
  s.set_result(f, 0, at::_ops::slice_Tensor::call(s.tensor(f, 0), int_at(s, 1, dyn), opt_sym(s, 2, dyn),
                                                  opt_sym(s, 3, dyn), c10::SymInt(int_at(s, 4, dyn))));
}
void select(const AtenSite& s, trd_frame& f, const int64_t* dyn) {
  s.set_result(f, 0, at::_ops::select_int::call(s.tensor(f, 0), int_at(s, 1, dyn), c10::SymInt(int_at(s, 2, dyn))));
}
void unsqueeze(const AtenSite& s, trd_frame& f, const int64_t* dyn) {
  s.set_result(f, 0, at::_ops::unsqueeze::call(s.tensor(f, 0), int_at(s, 1, dyn)));
}
void transpose(const AtenSite& s, trd_frame& f, const int64_t* dyn) {
  s.set_result(f, 0, at::_ops::transpose_int::call(s.tensor(f, 0), int_at(s, 1, dyn), int_at(s, 2, dyn)));
}
void t(const AtenSite& s, trd_frame& f, const int64_t*) { s.set_result(f, 0, at::_ops::t::call(s.tensor(f, 0))); }
void permute(const AtenSite& s, trd_frame& f, const int64_t* dyn) {
  s.set_result(f, 0, at::_ops::permute::call(s.tensor(f, 0), int_list(s, 1, dyn)));
}
void reshape(const AtenSite& s, trd_frame& f, const int64_t* dyn) {
  s.set_result(f, 0, at::_ops::reshape::call(s.tensor(f, 0), sym_list(s, 1, dyn)));
}
void view_dyn(const AtenSite& s, trd_frame& f, const int64_t* dyn) {
  s.set_result(f, 0, at::_ops::view::call(s.tensor(f, 0), sym_list(s, 1, dyn)));
}
void unsafe_view(const AtenSite& s, trd_frame& f, const int64_t* dyn) {
  s.set_result(f, 0, at::_ops::_unsafe_view::call(s.tensor(f, 0), sym_list(s, 1, dyn)));
}
void expand(const AtenSite& s, trd_frame& f, const int64_t* dyn) {
  s.set_result(f, 0, at::_ops::expand::call(s.tensor(f, 0), sym_list(s, 1, dyn), s.args[2].constant.toBool()));
}
void copy_inplace(const AtenSite& s, trd_frame& f, const int64_t*) {
  // The destination is an argument, state or a view slot; the op returns it.
  at::Tensor dst = s.tensor(f, 0);
  at::_ops::copy_::call(dst, s.tensor(f, 1), s.args[2].constant.toBool());
  s.set_result(f, 0, std::move(dst));
}

}  // namespace

// ---- any functional op of a common signature, called unboxed ---------------------------------
// Elementwise and pointwise ops (relu, rsqrt, pow.Tensor_Scalar, sub.Tensor, add.Scalar, ...) share
// a few C++ signatures. For a site whose schema is exactly one of them (no alias annotations, one
// Tensor result) the typed handle is taken once at load and called with the operands as they are,
// skipping the IValue stack. TypedOperatorHandle checks the signature against the registered
// kernel when it is taken; a mismatch leaves the site boxed.
using SigT = at::Tensor(const at::Tensor&);
using SigTT = at::Tensor(const at::Tensor&, const at::Tensor&);
using SigTS = at::Tensor(const at::Tensor&, const c10::Scalar&);
using SigTTS = at::Tensor(const at::Tensor&, const at::Tensor&, const c10::Scalar&);
using SigTSS = at::Tensor(const at::Tensor&, const c10::Scalar&, const c10::Scalar&);

// A Tensor operand: a location, or a constant tensor (a Python number as a wrapped 0-dim tensor).
const at::Tensor& tensor_operand(const AtenSite& s, const trd_frame& f, size_t k) {
  const ArgPlan& p = s.args[k];
  return p.kind == P::Tensor ? tensor_at(f, p.ref) : p.constant.toTensor();
}

template <class Sig>
const c10::TypedOperatorHandle<Sig>& handle(const AtenSite& s) {
  return *static_cast<const c10::TypedOperatorHandle<Sig>*>(s.typed_handle.get());
}

// A Scalar operand: a constant number, or a run-time float ($fj).
c10::Scalar scalar_operand(const AtenSite& s, size_t k, const int64_t* dyn) {
  const ArgPlan& p = s.args[k];
  return p.kind == P::Float ? c10::Scalar(dyn_float(dyn, p.ref.i)) : p.constant.toScalar();
}

void generic_t(const AtenSite& s, trd_frame& f, const int64_t*) {
  s.set_result(f, 0, handle<SigT>(s).call(tensor_operand(s, f, 0)));
}
void generic_tt(const AtenSite& s, trd_frame& f, const int64_t*) {
  s.set_result(f, 0, handle<SigTT>(s).call(tensor_operand(s, f, 0), tensor_operand(s, f, 1)));
}
void generic_ts(const AtenSite& s, trd_frame& f, const int64_t* dyn) {
  s.set_result(f, 0, handle<SigTS>(s).call(tensor_operand(s, f, 0), scalar_operand(s, 1, dyn)));
}
void generic_tts(const AtenSite& s, trd_frame& f, const int64_t* dyn) {
  s.set_result(f, 0, handle<SigTTS>(s).call(tensor_operand(s, f, 0), tensor_operand(s, f, 1),
                                            scalar_operand(s, 2, dyn)));
}
void generic_tss(const AtenSite& s, trd_frame& f, const int64_t* dyn) {
  s.set_result(f, 0, handle<SigTSS>(s).call(tensor_operand(s, f, 0), scalar_operand(s, 1, dyn),
                                            scalar_operand(s, 2, dyn)));
}

// 'T' for a Tensor formal whose operand is a location or a constant tensor, 'S' for a Scalar formal
// with a constant number or a run-time float; anything else ends the match.
std::string generic_signature(const AtenSite& site) {
  const auto& schema = site.op.schema();
  if (schema.returns().size() != 1 || schema.returns()[0].type()->kind() != c10::TypeKind::TensorType ||
      schema.returns()[0].alias_info() || schema.is_vararg() || schema.is_varret())
    return "";
  std::string sig;
  const auto& formals = schema.arguments();
  for (size_t k = 0; k < formals.size(); ++k) {
    const auto& a = formals[k];
    const ArgPlan& p = site.args[k];
    if (a.alias_info()) return "";
    const auto kind = a.type()->kind();
    if (kind == c10::TypeKind::TensorType && (p.kind == P::Tensor || (p.kind == P::Const && p.constant.isTensor())))
      sig += 'T';
    else if (kind == c10::TypeKind::NumberType && (p.kind == P::Float || (p.kind == P::Const &&
             (p.constant.isInt() || p.constant.isDouble() || p.constant.isBool()))))
      sig += 'S';
    else
      return "";
  }
  return sig;
}

template <class Sig>
TypedFn take_handle(AtenSite& site, TypedFn fn) {
  try {
    site.typed_handle = std::make_shared<c10::TypedOperatorHandle<Sig>>(site.op.typed<Sig>());
    return fn;
  } catch (const c10::Error&) {
    return nullptr;  // the registered kernel has another C++ signature: stay boxed
  }
}

TypedFn find_generic(AtenSite& site) {
  const std::string sig = generic_signature(site);
  if (sig == "T") return take_handle<SigT>(site, generic_t);
  if (sig == "TT") return take_handle<SigTT>(site, generic_tt);
  if (sig == "TS") return take_handle<SigTS>(site, generic_ts);
  if (sig == "TTS") return take_handle<SigTTS>(site, generic_tts);
  if (sig == "TSS") return take_handle<SigTSS>(site, generic_tss);
  return nullptr;
}

bool AtenSite::may_reuse() const {
  return typed == empty_like || typed == empty_memory_format || typed == mm || typed == linear ||
         typed == add_tensor || typed == mul_tensor;
}

namespace {
TypedFn find_typed_entry(AtenSite& site) {
  const std::string& n = site.name;
  if (n == "aten::mm" && plans_are(site, {P::Tensor, P::Tensor})) return mm;
  if (n == "aten::bmm" && plans_are(site, {P::Tensor, P::Tensor})) return bmm;
  if (n == "aten::addmm" && plans_are(site, {P::Tensor, P::Tensor, P::Tensor, P::Const, P::Const})) return addmm;
  if (n == "aten::add.Tensor" && plans_are(site, {P::Tensor, P::Tensor, P::Const})) return add_tensor;
  if (n == "aten::mul.Tensor" && plans_are(site, {P::Tensor, P::Tensor})) return mul_tensor;
  if (n == "aten::view" && plans_are(site, {P::Tensor, P::Const})) return view_const;
  const auto& a = site.args;
  auto tensor_at0 = a.size() >= 1 && a[0].kind == P::Tensor;
  if (n == "aten::linear" && a.size() == 3 && tensor_at0 && a[1].kind == P::Tensor &&
      (a[2].kind == P::Tensor || (a[2].kind == P::Const && a[2].constant.isNone())))
    return linear;
  if (n == "aten::slice.Tensor" && a.size() == 5 && tensor_at0 && is_int(a[1]) &&
      (is_int(a[2]) || (a[2].kind == P::Const && a[2].constant.isNone())) &&
      (is_int(a[3]) || (a[3].kind == P::Const && a[3].constant.isNone())) && is_int(a[4]))
    return slice;
  if (n == "aten::select.int" && a.size() == 3 && tensor_at0 && is_int(a[1]) && is_int(a[2])) return select;
  if (n == "aten::unsqueeze" && a.size() == 2 && tensor_at0 && is_int(a[1])) return unsqueeze;
  if (n == "aten::transpose.int" && a.size() == 3 && tensor_at0 && is_int(a[1]) && is_int(a[2])) return transpose;
  if (n == "aten::t" && a.size() == 1 && tensor_at0) return t;
  if (n == "aten::permute" && a.size() == 2 && tensor_at0 && is_int_list(a[1])) return permute;
  if (n == "aten::reshape" && a.size() == 2 && tensor_at0 && is_int_list(a[1])) return reshape;
  if (n == "aten::view" && a.size() == 2 && tensor_at0 && a[1].kind == P::IntList) return view_dyn;
  if (n == "aten::_unsafe_view" && a.size() == 2 && tensor_at0 && is_int_list(a[1])) return unsafe_view;
  if (n == "aten::expand" && a.size() == 3 && tensor_at0 && is_int_list(a[1]) && a[2].kind == P::Const)
    return expand;
  if (n == "aten::copy_" && a.size() == 3 && tensor_at0 && a[1].kind == P::Tensor && a[2].kind == P::Const)
    return copy_inplace;
  if (n == "aten::empty_like" && plans_are(site, {P::Tensor, P::Const, P::Const, P::Const, P::Const, P::Const}))
    return empty_like;
  if (n == "aten::empty.memory_format" && site.args.size() == 6 &&
      (site.args[0].kind == P::Const || site.args[0].kind == P::IntList) &&
      plans_are_from(site, 1, {P::Const, P::Const, P::Const, P::Const, P::Const}))
    return empty_memory_format;
  return find_generic(site);
}

}  // namespace

TypedFn find_typed(AtenSite& site) {
  TypedFn fn = find_typed_entry(site);
  if (fn == mm || fn == linear) site.gemm = std::make_shared<LtGemm>();
  if (fn == linear) site.linear_nd = typed::linear_nd_for_new_modules();
  return fn;
}

}  // namespace trident::runtime
