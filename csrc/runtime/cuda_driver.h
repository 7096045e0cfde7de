// The CUDA driver API, reached through dlopen("libcuda.so.1") on first use and never linked, so the
// extension imports and every CPU path runs on machines without a GPU. Types come from the cuda.h
// that Triton's wheel ships (the same header Triton's own launcher is built with).
#pragma once

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
};

// The loaded driver; throws std::runtime_error naming what is missing when there is no usable driver.
const Driver& driver();

// Throws std::runtime_error "<what>: <CUDA error name>: <description>" unless r == CUDA_SUCCESS.
void check(CUresult r, const std::string& what);

}  // namespace trident::runtime::cuda
