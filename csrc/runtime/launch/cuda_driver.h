// The CUDA driver API, reached through dlopen("libcuda.so.1") on first use and never linked, so the
// extension imports and every CPU path runs on machines without a GPU. Types come from the cuda.h
// that Triton's wheel ships (the same header Triton's own launcher is built with).
#pragma once

#include <c10/core/Stream.h>
#include <cuda.h>

#include <string>

namespace trident::runtime::cuda {

struct Driver {
  CUresult (*Init)(unsigned int);
  CUresult (*GetErrorName)(CUresult, const char**);
  CUresult (*GetErrorString)(CUresult, const char**);
  CUresult (*DeviceGet)(CUdevice*, int);
  CUresult (*DeviceGetAttribute)(int*, CUdevice_attribute, CUdevice);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*CtxGetCurrent)(CUcontext*);
  CUresult (*CtxSetCurrent)(CUcontext);
  CUresult (*ModuleLoadData)(CUmodule*, const void*);
  CUresult (*ModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*FuncGetAttribute)(int*, CUfunction_attribute, CUfunction);
  CUresult (*FuncSetAttribute)(CUfunction, CUfunction_attribute, int);
  CUresult (*FuncSetCacheConfig)(CUfunction, CUfunc_cache);
  CUresult (*LaunchKernelEx)(const CUlaunchConfig*, CUfunction, void**, void**);

  // Stream capture and graph inspection, for recording a library's launches (launch_record.h).
  // Optional: null where the driver lacks them (cuFuncGetParamInfo needs CUDA 12.4); callers then
  // record nothing. capture_api() says whether all of them are there.
  CUresult (*StreamCreate)(CUstream*, unsigned int);
  CUresult (*StreamBeginCapture)(CUstream, CUstreamCaptureMode);
  CUresult (*StreamEndCapture)(CUstream, CUgraph*);
  CUresult (*GraphGetNodes)(CUgraph, CUgraphNode*, size_t*);
  CUresult (*GraphNodeGetType)(CUgraphNode, CUgraphNodeType*);
  CUresult (*GraphNodeGetDependencies)(CUgraphNode, CUgraphNode*, size_t*);  // v1; v2 preferred (below)
  CUresult (*GraphNodeGetDependencies2)(CUgraphNode, CUgraphNode*, CUgraphEdgeData*, size_t*);  // CUDA 12.3
  CUresult (*GraphKernelNodeGetParams)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS*);
  CUresult (*GraphKernelNodeGetAttribute)(CUgraphNode, CUkernelNodeAttrID, CUkernelNodeAttrValue*);
  CUresult (*GraphDestroy)(CUgraph);
  CUresult (*FuncGetParamInfo)(CUfunction, size_t, size_t*, size_t*);
  CUresult (*KernelGetFunction)(CUfunction*, CUkernel);
  CUresult (*StreamIsCapturing)(CUstream, CUstreamCaptureStatus*);  // op_replay.h: not into a caller's capture
  // Whole-run graphs (spec_graphs.h): instantiated from a stream capture and launched. Optional.
  CUresult (*GraphInstantiateWithFlags)(CUgraphExec*, CUgraph, unsigned long long);
  CUresult (*GraphLaunch)(CUgraphExec, CUstream);
  CUresult (*GraphExecDestroy)(CUgraphExec);
  CUresult (*MemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  // A graph in segments (spec_graphs.h, Segments) reads a device value between two of them. Optional.
  CUresult (*MemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);
  CUresult (*StreamSynchronize)(CUstream);
  // Rebinding a whole-run graph's argument addresses (graph_rebind.h): read the copies and memsets,
  // rewrite nodes of the executable graph. Optional: null where missing; graphs then bind addresses.
  CUresult (*GraphMemcpyNodeGetParams)(CUgraphNode, CUDA_MEMCPY3D*);
  CUresult (*GraphMemsetNodeGetParams)(CUgraphNode, CUDA_MEMSET_NODE_PARAMS*);
  CUresult (*GraphExecKernelNodeSetParams)(CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS*);
  CUresult (*GraphExecMemcpyNodeSetParams)(CUgraphExec, CUgraphNode, const CUDA_MEMCPY3D*, CUcontext);
  CUresult (*GraphExecMemsetNodeSetParams)(CUgraphExec, CUgraphNode, const CUDA_MEMSET_NODE_PARAMS*, CUcontext);
  CUresult (*FuncGetName)(const char**, CUfunction);  // CUDA 12.3; for messages only
  // What a stream capture's next work will depend on (last_captured_node); v3 (CUDA 12.3) or v2.
  CUresult (*StreamGetCaptureInfo3)(CUstream, CUstreamCaptureStatus*, cuuint64_t*, CUgraph*, const CUgraphNode**,
                                    const CUgraphEdgeData**, size_t*);
  CUresult (*StreamGetCaptureInfo2)(CUstream, CUstreamCaptureStatus*, cuuint64_t*, CUgraph*, const CUgraphNode**,
                                    size_t*);
  // Host-side TMA descriptors (tma_args.h); optional: a kernel taking one fails its launch without it.
  CUresult (*TensorMapEncodeTiled)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  bool rebind_api() const {
    return capture_api() && GraphMemcpyNodeGetParams && GraphMemsetNodeGetParams && GraphExecKernelNodeSetParams &&
           GraphExecMemcpyNodeSetParams && GraphExecMemsetNodeSetParams && CtxGetCurrent;
  }
  bool graph_api() const {
    return StreamCreate && StreamBeginCapture && StreamEndCapture && GraphDestroy && StreamIsCapturing &&
           GraphInstantiateWithFlags && GraphLaunch && GraphExecDestroy && MemcpyDtoDAsync;
  }
  bool segments_api() const { return graph_api() && MemcpyDtoHAsync && StreamSynchronize; }
  bool capture_api() const {
    return StreamCreate && StreamBeginCapture && StreamEndCapture && GraphGetNodes && GraphNodeGetType &&
           (GraphNodeGetDependencies || GraphNodeGetDependencies2) && GraphKernelNodeGetParams && GraphKernelNodeGetAttribute && GraphDestroy &&
           FuncGetParamInfo && KernelGetFunction && StreamIsCapturing;
  }
};

// The loaded driver; throws std::runtime_error naming what is missing when there is no usable driver.
const Driver& driver();

// Throws std::runtime_error "<what>: <CUDA error name>: <description>" unless r == CUDA_SUCCESS.
void check(CUresult r, const std::string& what);

// A call refused inside a capture (thread-local mode forbids, say, a synchronizing call) leaves its
// error as the CUDA runtime's last error, where PyTorch's next launch check would report it as its
// own. The runtime is PyTorch's (already loaded): this clears it there.
void clear_runtime_error();

// The node the work just captured on `s` made: the one node the capture's next work would depend on.
// nullptr when `s` is not capturing, the driver cannot say, or that work forked or joined streams.
CUgraphNode last_captured_node(CUstream s);

// PyTorch's current stream on CUDA device `device`, as a driver handle.
CUstream current_stream(int device);

// A non-blocking stream of the current context for the process's captures, created on first use and
// kept: captures run there, so a caller's stream is never in capture mode. One per purpose
// (0: a library call's launches, launch_record.h; 1: a whole run, spec_graphs.h). nullptr without a
// current context or when the driver refuses.
CUstream private_stream(int purpose);

// PyTorch's current stream on `device` set to the driver stream `s` for the scope (a capture runs
// ATen calls on a private stream). An external stream's id is its handle (PyTorch's
// getStreamFromExternal), which c10 core can express without c10_cuda.
class CurrentStreamIs {
 public:
  CurrentStreamIs(int device, CUstream s);
  ~CurrentStreamIs();
  CurrentStreamIs(const CurrentStreamIs&) = delete;
  CurrentStreamIs& operator=(const CurrentStreamIs&) = delete;

 private:
  c10::Stream prev_;
};

}  // namespace trident::runtime::cuda
