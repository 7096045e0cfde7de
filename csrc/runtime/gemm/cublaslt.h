// cuBLASLt reached through dlopen, as the driver is (cuda_driver.h): the extension never links it,
// so it imports and every CPU path runs without CUDA. The CPU build has no CUDA toolkit headers, so
// the few types and enum values used are declared here with the values cublasLt.h (CUDA 12 and 13)
// gives them. The library is the one PyTorch already loaded (libcublasLt.so.13 or .12).
#pragma once

#include <cstddef>
#include <cstdint>

namespace trident::runtime::cublaslt {

using Status = int;  // cublasStatus_t: 0 is CUBLAS_STATUS_SUCCESS
struct HandleOpaque;
struct DescOpaque;
struct LayoutOpaque;
struct PrefOpaque;
using Handle = HandleOpaque*;
using Desc = DescOpaque*;
using Layout = LayoutOpaque*;
using Pref = PrefOpaque*;
struct Algo {
  uint64_t data[8];
};
struct HeuristicResult {
  Algo algo;
  size_t workspace_size;
  Status state;
  float waves_count;
  int reserved[4];
};

enum : int {
  kSuccess = 0,
  kR32F = 0,   // cudaDataType_t
  kR16F = 2,
  kR16BF = 14,
  kCompute32F = 68,  // cublasComputeType_t CUBLAS_COMPUTE_32F
  kOpN = 0,          // cublasOperation_t
  kOpT = 1,
  kDescTransA = 3,   // cublasLtMatmulDescAttributes_t
  kDescTransB = 4,
  kPrefMaxWorkspaceBytes = 1,  // cublasLtMatmulPreferenceAttributes_t
};

struct Api {
  Status (*Create)(Handle*);
  Status (*MatmulDescCreate)(Desc*, int compute_type, int scale_type);
  Status (*MatmulDescSetAttribute)(Desc, int attr, const void* buf, size_t size);
  Status (*MatrixLayoutCreate)(Layout*, int type, uint64_t rows, uint64_t cols, int64_t ld);
  Status (*MatmulPreferenceCreate)(Pref*);
  Status (*MatmulPreferenceDestroy)(Pref);
  Status (*MatmulPreferenceSetAttribute)(Pref, int attr, const void* buf, size_t size);
  Status (*MatmulAlgoGetHeuristic)(Handle, Desc, Layout a, Layout b, Layout c, Layout d, Pref, int requested,
                                   HeuristicResult* results, int* returned);
  Status (*Matmul)(Handle, Desc, const void* alpha, const void* a, Layout, const void* b, Layout, const void* beta,
                   const void* c, Layout, void* d, Layout, const Algo*, void* workspace, size_t workspace_size,
                   void* stream);  // cudaStream_t
};

// The loaded library, or nullptr when none can be loaded (then callers use ATen).
const Api* api();

// The process's handle for `device` (created on first use; cuBLASLt handles are thread-safe).
// nullptr when creation fails.
Handle handle(int device);

}  // namespace trident::runtime::cublaslt
