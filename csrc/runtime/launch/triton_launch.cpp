#include "runtime/launch/triton_launch.h"
#include "runtime/launch/launch_args.h"
#include "common/errors.h"

#include <c10/core/Allocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstdio>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "ir/text.h"
#include "runtime/aten/aten_site.h"
#include "runtime/launch/cuda_driver.h"

namespace trident::runtime {
namespace {

CType parse_ctype(const std::string& t) {
  static const std::pair<const char*, CType> table[] = {
      {"ptr", CType::Ptr}, {"i1", CType::I1}, {"i8", CType::I8}, {"u8", CType::U8}, {"i16", CType::I16},
      {"u16", CType::U16}, {"i32", CType::I32}, {"u32", CType::U32}, {"i64", CType::I64}, {"u64", CType::U64},
      {"fp16", CType::Fp16}, {"bf16", CType::Bf16}, {"fp32", CType::Fp32}, {"fp64", CType::Fp64},
      {"tmadesc", CType::TmaDesc}};
  for (const auto& [name, c] : table)
    if (t == name) return c;
  ::trident::internal_error("unknown kernel parameter type '" + t + "'", __FILE__, __LINE__);
}

std::string read_file(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error("cannot read cubin " + path);
  std::string s;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  std::fclose(f);
  return s;
}

// The device's primary context (the one PyTorch's runtime uses), retained once per device; after
// that a lookup is one atomic read, since it runs on every launch.
CUcontext primary_context(int device) {
  constexpr int kMaxDevices = 64;
  static std::array<std::atomic<CUcontext>, kMaxDevices> retained{};
  if (device >= 0 && device < kMaxDevices)
    if (CUcontext ctx = retained[device].load(std::memory_order_acquire)) return ctx;
  static std::mutex mu;
  static std::unordered_map<int, CUcontext> contexts;
  std::lock_guard<std::mutex> lock(mu);
  auto it = contexts.find(device);
  if (it != contexts.end()) return it->second;
  const auto& d = cuda::driver();
  CUdevice dev;
  CUcontext ctx;
  cuda::check(d.DeviceGet(&dev, device), "cuDeviceGet");
  cuda::check(d.DevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  contexts[device] = ctx;
  if (device >= 0 && device < kMaxDevices) retained[device].store(ctx, std::memory_order_release);
  return ctx;
}

// Makes the device's primary context current for the scope of a launch, restoring the previous one.
// On the usual path (PyTorch already made it current on this thread) this is one cuCtxGetCurrent.
class ContextScope {
 public:
  explicit ContextScope(int device) : ctx_(primary_context(device)) {
    const auto& d = cuda::driver();
    cuda::check(d.CtxGetCurrent(&prev_), "cuCtxGetCurrent");
    if (prev_ != ctx_) cuda::check(d.CtxSetCurrent(ctx_), "cuCtxSetCurrent");
  }
  ~ContextScope() {
    if (prev_ && prev_ != ctx_) cuda::driver().CtxSetCurrent(prev_);
  }

 private:
  CUcontext ctx_ = nullptr, prev_ = nullptr;
};

// The CUtensorMap of a tensor descriptor over `t` (the descriptor's base viewed with its shape and
// strides) as Triton's launcher builds it (make_tensordesc_arg, fillTMADescriptor): tma_args.h's
// arguments, interleave none, L2 promotion 128B.
void encode_tma(const TmaMeta& meta, bool nan_padding, const at::Tensor& t, const std::string& kernel, CUtensorMap* map) {
  const std::string what = "kernel " + kernel + ": a tensor descriptor";
  if (t.dim() != meta.rank)
    throw std::runtime_error(what + " of rank " + std::to_string(meta.rank) + " over a tensor of rank " +
                             std::to_string(t.dim()));
  TmaEncodeArgs a;
  if (std::string why = tma_encode_args(meta, t.sizes().data(), t.strides().data(), nan_padding, a); !why.empty())
    throw std::runtime_error(what + ": " + why);
  const auto& d = cuda::driver();
  if (!d.TensorMapEncodeTiled) throw std::runtime_error(what + ": the CUDA driver has no cuTensorMapEncodeTiled");
  cuda::check(d.TensorMapEncodeTiled(map, static_cast<CUtensorMapDataType>(a.elem_type), a.rank, t.data_ptr(),
                                     a.dims.data(), a.byte_strides.data(), a.box.data(), a.elem_strides.data(),
                                     CU_TENSOR_MAP_INTERLEAVE_NONE, static_cast<CUtensorMapSwizzle>(a.swizzle),
                                     CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                     a.nan_fill ? CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA
                                                : CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
              what + ": cuTensorMapEncodeTiled");
}

// Packs one parameter into an 8-byte slot the way Triton's generated launcher types it.
uint64_t pack(CType t, int64_t i, double f, bool is_float) {
  uint64_t slot = 0;
  auto put = [&](auto v) { std::memcpy(&slot, &v, sizeof v); };
  switch (t) {
    case CType::I1:
    case CType::I8: put(static_cast<int8_t>(i)); break;
    case CType::U8: put(static_cast<uint8_t>(i)); break;
    case CType::I16: put(static_cast<int16_t>(i)); break;
    case CType::U16: put(static_cast<uint16_t>(i)); break;
    case CType::I32: put(static_cast<int32_t>(i)); break;
    case CType::U32: put(static_cast<uint32_t>(i)); break;
    case CType::I64:
    case CType::U64: put(i); break;
    case CType::Fp16: put(c10::Half(static_cast<float>(is_float ? f : i)).x); break;
    case CType::Bf16: put(c10::BFloat16(static_cast<float>(is_float ? f : i)).x); break;
    case CType::Fp32: put(static_cast<float>(is_float ? f : i)); break;
    case CType::Fp64: put(is_float ? f : static_cast<double>(i)); break;
    case CType::Ptr: put(i); break;
    case CType::TmaDesc: break;  // not a slot: encoded apart (LaunchSite::launch)
  }
  return slot;
}

}  // namespace

KernelInfo::KernelInfo(ir::Kernel decl) : decl_(std::move(decl)) {
  size_t b = 0;
  while (b < decl_.params.size()) {
    size_t e = decl_.params.find(',', b);
    if (e == std::string::npos) e = decl_.params.size();
    if (e > b) params_.push_back(parse_ctype(decl_.params.substr(b, e - b)));
    b = e + 1;
  }
  for (CType t : params_) {
    if (t != CType::TmaDesc) {
      tma_of_param_.push_back(-1);
      continue;
    }
    const size_t j = tma_.size();
    TRD_INTERNAL_ASSERT(j < decl_.tma.size(), "kernel " + decl_.name + ": a tmadesc parameter without its tma clause");
    const ir::TmaParam& t_ir = decl_.tma[j];
    TmaMeta m;
    m.swizzle = t_ir.swizzle;
    m.elem_size = t_ir.elem_size;
    m.elem_type = t_ir.elem_type;
    m.rank = static_cast<int>(t_ir.block.size());
    for (int d = 0; d < m.rank && d < kTmaMaxRank; ++d) m.block[d] = static_cast<uint32_t>(t_ir.block[d]);
    m.fp4_padded = t_ir.fp4_padded;
    tma_.push_back(m);
    tma_of_param_.push_back(static_cast<int32_t>(j));
  }
  cubin_ = read_file(decl_.cubin);
}

namespace {
// Functions loaded in this process, by device and kernel name, each with the cubin it came from. A
// specialization re-lowered from a captured program declares the kernels of the ones before it:
// each would otherwise load its cubin again (a cuModuleLoadData, about a millisecond, per kernel
// per specialization). Matched on the cubin's bytes, not only its name.
struct LoadedCubin {
  std::string cubin;
  CUfunction fn;
};
std::mutex loaded_mu;
std::unordered_map<std::string, std::vector<LoadedCubin>> loaded_cubins;

std::string loaded_key(int device, const std::string& name) { return std::to_string(device) + ":" + name; }
}  // namespace

void* KernelInfo::load(int device) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = functions_.find(device);
  if (it != functions_.end()) return it->second;
  std::lock_guard<std::mutex> loaded_lock(loaded_mu);
  for (const LoadedCubin& l : loaded_cubins[loaded_key(device, decl_.name)])
    if (l.cubin == cubin_) {
      functions_[device] = reinterpret_cast<void*>(l.fn);
      if (device >= 0 && device < kMaxDevices) loaded_[device].store(l.fn, std::memory_order_release);
      return l.fn;
    }
  const auto& d = cuda::driver();
  const std::string what = "kernel " + decl_.name;
  ContextScope scope(device);
  CUmodule mod;
  cuda::check(d.ModuleLoadData(&mod, cubin_.data()), what + ": cuModuleLoadData");
  CUfunction fn;
  cuda::check(d.ModuleGetFunction(&fn, mod, decl_.name.c_str()), what + ": cuModuleGetFunction");
  if (decl_.shared > 49152) {  // Triton's rule (driver.c loadBinary): opt in above 48 KB
    CUdevice dev;
    cuda::check(d.DeviceGet(&dev, device), what + ": cuDeviceGet");
    int optin = 0, static_shared = 0;
    cuda::check(d.DeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev),
                what + ": cuDeviceGetAttribute");
    if (decl_.shared > optin)
      throw std::runtime_error(what + " needs " + std::to_string(decl_.shared) + " bytes of shared memory, device " +
                               std::to_string(device) + " allows " + std::to_string(optin));
    cuda::check(d.FuncSetCacheConfig(fn, CU_FUNC_CACHE_PREFER_SHARED), what + ": cuFuncSetCacheConfig");
    cuda::check(d.FuncGetAttribute(&static_shared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn),
                what + ": cuFuncGetAttribute");
    cuda::check(d.FuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, optin - static_shared),
                what + ": cuFuncSetAttribute");
  }
  if (decl_.num_ctas == 16)
    cuda::check(d.FuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
                what + ": cuFuncSetAttribute");
  functions_[device] = reinterpret_cast<void*>(fn);
  if (device >= 0 && device < kMaxDevices) loaded_[device].store(fn, std::memory_order_release);
  loaded_cubins[loaded_key(device, decl_.name)].push_back({cubin_, fn});
  return fn;
}

LaunchSite resolve_launch(const ir::Instr& in, const KernelInfo& k) {
  using K = ir::Operand::Kind;
  LaunchSite s;
  s.kernel = static_cast<int32_t>(in.a);
  s.name = k.decl().name;
  TRD_INTERNAL_ASSERT(in.operands.size() == k.params().size(),
                      "launch of " + s.name + " gives " + std::to_string(in.operands.size()) +
                          " parameters, the kernel takes " + std::to_string(k.params().size()));
  for (size_t p = 0; p < in.operands.size(); ++p) {
    const ir::Operand& o = in.operands[p];
    LaunchSite::Param q;
    const bool ptr = k.params()[p] == CType::Ptr, desc = k.params()[p] == CType::TmaDesc;
    TRD_INTERNAL_ASSERT(!desc || o.kind == K::Value || o.kind == K::ArgRef || o.kind == K::StateRef,
                        "launch of " + s.name + ": a tensor descriptor parameter " + std::to_string(p) +
                            " takes a tensor (the base viewed with the descriptor's shape and strides)");
    if (o.kind == K::Value || o.kind == K::ArgRef || o.kind == K::StateRef || o.kind == K::Ptr) {
      TRD_INTERNAL_ASSERT(ptr || desc, "launch of " + s.name + ": tensor for non-pointer parameter " + std::to_string(p));
      q.kind = LaunchSite::Param::Kind::Tensor;
      q.ref = o;
      if (o.kind == K::Ptr) {  // ptr(base, off): the verifier checked the shape of it
        q.ref = o.items.at(0);
        const ir::Operand& off = o.items.at(1);
        if (off.kind == K::Sym && off.j != 1) q.offset_dyn = static_cast<int32_t>(off.i);
        else q.i = off.i;
      }
    } else if (o.kind == K::Sym) {
      q.kind = o.j == 1 ? LaunchSite::Param::Kind::DynFloat : LaunchSite::Param::Kind::Dyn;
      q.ref = o;
    } else if (o.kind == K::Int || o.kind == K::Bool) {
      q.kind = LaunchSite::Param::Kind::Int;
      q.i = o.i;
    } else if (o.kind == K::Float) {
      q.kind = LaunchSite::Param::Kind::Float;
      q.f = o.f;
    } else if (o.kind == K::None && ptr) {
      q.kind = LaunchSite::Param::Kind::Int;  // a null pointer
    } else {
      ::trident::internal_error("launch of " + s.name + ": unsupported parameter " + ir::print_operand(o), __FILE__,
                                __LINE__);
    }
    s.params.push_back(q);
  }
  s.ndyn = dyn_count(in.operands);
  return s;
}

void LaunchSite::fill(const trd_frame& f, const KernelInfo& k, const int64_t* dyn, LaunchArgs& a) const {
  const size_t n = params.size();
  a.slots.assign(n + 2, 0);
  a.ptrs.assign(n + 2, nullptr);
  a.nmaps = 0;
  a.device = -1;
  for (size_t p = 0; p < n; ++p) {
    const Param& q = params[p];
    switch (q.kind) {
      case Param::Kind::Tensor: {
        const at::Tensor& t = tensor_at(f, q.ref);
        if (!t.defined() || !t.is_cuda())
          throw std::runtime_error("parameter " + std::to_string(p) + " is not a CUDA tensor");
        if (a.device < 0) a.device = t.get_device();
        if (const int32_t j = k.tma_of_param()[p]; j >= 0) {
          if (a.nmaps == kMaxTmaParams)
            throw std::runtime_error("kernel " + name + " takes more than " + std::to_string(kMaxTmaParams) +
                                     " tensor descriptors");
          encode_tma(k.tma()[j], k.decl().tma[j].nan_padding, t, name, &a.maps[a.nmaps]);
          a.ptrs[p] = &a.maps[a.nmaps++];
          continue;
        }
        a.slots[p] = reinterpret_cast<uint64_t>(t.data_ptr()) + q.i + (q.offset_dyn >= 0 ? dyn[q.offset_dyn] : 0);
        break;
      }
      case Param::Kind::Dyn: a.slots[p] = pack(k.params()[p], dyn[q.ref.i], 0.0, false); break;
      case Param::Kind::Int: a.slots[p] = pack(k.params()[p], q.i, 0.0, false); break;
      case Param::Kind::Float: a.slots[p] = pack(k.params()[p], 0, q.f, true); break;
      case Param::Kind::DynFloat: a.slots[p] = pack(k.params()[p], 0, dyn_float(dyn, q.ref.i), true); break;
    }
    a.ptrs[p] = &a.slots[p];
  }
  a.ptrs[n] = &a.slots[n];
  a.ptrs[n + 1] = &a.slots[n + 1];
}

void* LaunchSite::launch(trd_frame& f, const KernelInfo& k, const uint32_t* grid, const int64_t* dyn,
                         c10::SmallVector<uint64_t, 16>* slots_out) const {
  const ir::Kernel& decl = k.decl();
  const size_t n = params.size();
  LaunchArgs a;
  fill(f, k, dyn, a);
  int device = a.device;
  auto* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  const c10::Device current = impl->getDevice();
  if (device < 0) device = current.index();
  const c10::Device cuda_device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device));
  if (slots_out) *slots_out = a.slots;
  if ((uint64_t)grid[0] * grid[1] * grid[2] == 0) return nullptr;  // Triton skips empty grids too

  // Switch devices only when the kernel's device is not already current (the common case is free).
  std::optional<c10::DeviceGuard> device_guard;
  if (current != cuda_device) device_guard.emplace(cuda_device);
  CUstream stream = static_cast<CUstream>(impl->getStream(cuda_device).native_handle());
  // Scratch buffers live until the launch is queued: the caching allocator orders their reuse after
  // this stream's work, exactly as Triton's launcher dropping its buffer after the launch.
  c10::DataPtr global_scratch, profile_scratch;
  const uint64_t programs = (uint64_t)grid[0] * grid[1] * grid[2] * decl.num_ctas;
  if (decl.global_scratch > 0) global_scratch = c10::GetAllocator(c10::DeviceType::CUDA)->allocate(programs * decl.global_scratch);
  if (decl.profile_scratch > 0) profile_scratch = c10::GetAllocator(c10::DeviceType::CUDA)->allocate(programs * decl.profile_scratch);
  a.slots[n] = reinterpret_cast<uint64_t>(global_scratch.get());
  a.slots[n + 1] = reinterpret_cast<uint64_t>(profile_scratch.get());
  if (slots_out) *slots_out = a.slots;

  CUfunction fn = static_cast<CUfunction>(k.function(device));
  ContextScope ctx(device);
  CUlaunchAttribute attrs[4];
  unsigned nattrs = 0;
  if (decl.launch_pdl) {
    attrs[nattrs].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attrs[nattrs++].value.programmaticStreamSerializationAllowed = 1;
  }
  if (decl.cooperative) {
    attrs[nattrs].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attrs[nattrs++].value.cooperative = 1;
  }
  if (decl.num_ctas != 1) {
    attrs[nattrs].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attrs[nattrs].value.clusterDim.x = decl.num_ctas;
    attrs[nattrs].value.clusterDim.y = 1;
    attrs[nattrs++].value.clusterDim.z = 1;
    attrs[nattrs].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE;
    attrs[nattrs++].value.clusterSchedulingPolicyPreference = CU_CLUSTER_SCHEDULING_POLICY_SPREAD;
  }
  CUlaunchConfig config;
  std::memset(&config, 0, sizeof config);
  config.gridDimX = grid[0] * decl.num_ctas;
  config.gridDimY = grid[1];
  config.gridDimZ = grid[2];
  config.blockDimX = 32 * decl.num_warps;
  config.blockDimY = 1;
  config.blockDimZ = 1;
  config.sharedMemBytes = decl.shared;
  config.hStream = stream;
  config.attrs = attrs;
  config.numAttrs = nattrs;
  cuda::check(cuda::driver().LaunchKernelEx(&config, fn, a.ptrs.data(), nullptr), "cuLaunchKernelEx");
  return stream;
}

}  // namespace trident::runtime
