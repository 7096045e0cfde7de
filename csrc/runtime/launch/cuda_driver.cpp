#include "runtime/launch/cuda_driver.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <dlfcn.h>

#include <map>
#include <mutex>
#include <stdexcept>

namespace trident::runtime::cuda {
namespace {

template <typename F>
void bind(void* lib, F& slot, const char* name) {
  void* p = dlsym(lib, name);
  if (!p) throw std::runtime_error(std::string("libcuda.so.1 has no ") + name + ": driver too old");
  slot = reinterpret_cast<F>(p);
}

template <typename F>
void bind_optional(void* lib, F& slot, const char* name) {
  slot = reinterpret_cast<F>(dlsym(lib, name));
}

Driver load() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) throw std::runtime_error(std::string("cannot load the CUDA driver (libcuda.so.1): ") + dlerror());
  Driver d{};
  bind(lib, d.Init, "cuInit");
  bind(lib, d.GetErrorName, "cuGetErrorName");
  bind(lib, d.GetErrorString, "cuGetErrorString");
  bind(lib, d.DeviceGet, "cuDeviceGet");
  bind(lib, d.DeviceGetAttribute, "cuDeviceGetAttribute");
  bind(lib, d.DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  bind(lib, d.CtxGetCurrent, "cuCtxGetCurrent");
  bind(lib, d.CtxSetCurrent, "cuCtxSetCurrent");
  bind(lib, d.ModuleLoadData, "cuModuleLoadData");
  bind(lib, d.ModuleGetFunction, "cuModuleGetFunction");
  bind(lib, d.FuncGetAttribute, "cuFuncGetAttribute");
  bind(lib, d.FuncSetAttribute, "cuFuncSetAttribute");
  bind(lib, d.FuncSetCacheConfig, "cuFuncSetCacheConfig");
  bind(lib, d.LaunchKernelEx, "cuLaunchKernelEx");
  // The versioned names are the ABIs cuda.h's macros select (CUDA_KERNEL_NODE_PARAMS is _v2).
  bind_optional(lib, d.StreamCreate, "cuStreamCreate");
  bind_optional(lib, d.StreamBeginCapture, "cuStreamBeginCapture_v2");
  bind_optional(lib, d.StreamEndCapture, "cuStreamEndCapture");
  bind_optional(lib, d.GraphGetNodes, "cuGraphGetNodes");
  bind_optional(lib, d.GraphNodeGetType, "cuGraphNodeGetType");
  bind_optional(lib, d.GraphNodeGetDependencies, "cuGraphNodeGetDependencies");
  bind_optional(lib, d.GraphNodeGetDependencies2, "cuGraphNodeGetDependencies_v2");
  bind_optional(lib, d.GraphKernelNodeGetParams, "cuGraphKernelNodeGetParams_v2");
  bind_optional(lib, d.GraphKernelNodeGetAttribute, "cuGraphKernelNodeGetAttribute");
  bind_optional(lib, d.GraphDestroy, "cuGraphDestroy");
  bind_optional(lib, d.FuncGetParamInfo, "cuFuncGetParamInfo");
  bind_optional(lib, d.KernelGetFunction, "cuKernelGetFunction");
  bind_optional(lib, d.StreamIsCapturing, "cuStreamIsCapturing");
  bind_optional(lib, d.GraphInstantiateWithFlags, "cuGraphInstantiateWithFlags");
  bind_optional(lib, d.GraphLaunch, "cuGraphLaunch");
  bind_optional(lib, d.GraphExecDestroy, "cuGraphExecDestroy");
  bind_optional(lib, d.MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
  bind_optional(lib, d.MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
  bind_optional(lib, d.StreamSynchronize, "cuStreamSynchronize");
  bind_optional(lib, d.GraphMemcpyNodeGetParams, "cuGraphMemcpyNodeGetParams");
  bind_optional(lib, d.GraphMemsetNodeGetParams, "cuGraphMemsetNodeGetParams");
  bind_optional(lib, d.GraphExecKernelNodeSetParams, "cuGraphExecKernelNodeSetParams_v2");
  bind_optional(lib, d.GraphExecMemcpyNodeSetParams, "cuGraphExecMemcpyNodeSetParams");
  bind_optional(lib, d.GraphExecMemsetNodeSetParams, "cuGraphExecMemsetNodeSetParams");
  bind_optional(lib, d.FuncGetName, "cuFuncGetName");
  bind_optional(lib, d.TensorMapEncodeTiled, "cuTensorMapEncodeTiled");
  bind_optional(lib, d.StreamGetCaptureInfo3, "cuStreamGetCaptureInfo_v3");
  bind_optional(lib, d.StreamGetCaptureInfo2, "cuStreamGetCaptureInfo_v2");
  CUresult r = d.Init(0);
  if (r != CUDA_SUCCESS) throw std::runtime_error("cuInit failed with CUDA error " + std::to_string(r));
  return d;
}

}  // namespace

const Driver& driver() {
  static std::once_flag once;
  static Driver d;
  static std::string failure;
  std::call_once(once, [] {
    try {
      d = load();
    } catch (const std::exception& e) {
      failure = e.what();
    }
  });
  if (!failure.empty()) throw std::runtime_error(failure);
  return d;
}

void check(CUresult r, const std::string& what) {
  if (r == CUDA_SUCCESS) return;
  const char* name = "unknown";
  const char* desc = "";
  driver().GetErrorName(r, &name);
  driver().GetErrorString(r, &desc);
  throw std::runtime_error(what + ": " + name + ": " + desc);
}

void clear_runtime_error() {
  for (const char* name : {"libcudart.so.13", "libcudart.so.12"})
    if (void* lib = dlopen(name, RTLD_NOW | RTLD_NOLOAD)) {
      if (auto get_last = reinterpret_cast<int (*)()>(dlsym(lib, "cudaGetLastError"))) get_last();
      dlclose(lib);
      return;
    }
}

CUgraphNode last_captured_node(CUstream s) {
  const Driver& d = driver();
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  CUgraph graph = nullptr;
  const CUgraphNode* deps = nullptr;
  size_t n = 0;
  CUresult r = CUDA_ERROR_NOT_SUPPORTED;
  if (d.StreamGetCaptureInfo3) {
    const CUgraphEdgeData* edges = nullptr;
    r = d.StreamGetCaptureInfo3(s, &status, &id, &graph, &deps, &edges, &n);
  } else if (d.StreamGetCaptureInfo2) {
    r = d.StreamGetCaptureInfo2(s, &status, &id, &graph, &deps, &n);
  }
  return r == CUDA_SUCCESS && status == CU_STREAM_CAPTURE_STATUS_ACTIVE && n == 1 ? deps[0] : nullptr;
}

CUstream current_stream(int device) {
  const c10::Device dev(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device));
  return static_cast<CUstream>(c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(dev).native_handle());
}

CUstream private_stream(int purpose) {
  CUcontext ctx = nullptr;
  if (driver().CtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx) return nullptr;
  static std::mutex mu;
  static auto* streams = new std::map<std::pair<CUcontext, int>, CUstream>();  // never destroyed (exit order)
  std::lock_guard<std::mutex> lock(mu);
  auto it = streams->find({ctx, purpose});
  if (it != streams->end()) return it->second;
  CUstream s = nullptr;
  if (!driver().StreamCreate || driver().StreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) return nullptr;
  streams->emplace(std::make_pair(ctx, purpose), s);
  return s;
}

CurrentStreamIs::CurrentStreamIs(int device, CUstream s)
    : prev_(c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)
                ->exchangeStream(c10::Stream(c10::Stream::UNSAFE,
                                             c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device)),
                                             reinterpret_cast<c10::StreamId>(s)))) {}

CurrentStreamIs::~CurrentStreamIs() { c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->exchangeStream(prev_); }

}  // namespace trident::runtime::cuda
