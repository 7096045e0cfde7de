// The kernel launches one library call issues, recorded once and launched again without the library.
//
// cuBLASLt spends about 4 µs of host time per cublasLtMatmul beyond the launches it issues (checks,
// kernel choice, parameter and TMA-descriptor building; benchmarks/gemm_algos.py, NOTES session 5).
// A call repeated with the same arguments (the same pointers, sizes and workspace) issues the same
// launches, byte for byte: that is what makes a CUDA graph of it replayable. A LaunchRecord takes
// them from a stream capture of the call on a private stream (nothing runs) and issues them again
// with cuLaunchKernelEx on the caller's stream.
//
// Contract:
//   - capture() keeps a record only when the capture is a chain of kernel nodes whose parameters it
//     can read in full (each one through cuFuncGetParamInfo, or the one buffer a launch passed);
//     memsets, copies, host nodes, forks or unreadable parameters give no record, and the caller
//     keeps calling the library.
//   - A replay launches the kernels in the recorded order with their grid, block, dynamic shared
//     memory, parameter bytes and the launch attributes that shape how a kernel runs (cluster
//     dimensions and scheduling policy, cooperative). Programmatic (PDL) edges between them become
//     plain stream order, which is stricter. Priority, memory sync domain and access policy come
//     from the replay stream, as for any launch on it.
//   - Equality of arguments is the caller's business, and so is checking a first replay's result
//     against the library's: a record says nothing about calls with other pointers.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace trident::runtime {

class LaunchRecord {
 public:
  // Runs enqueue(capture_stream) under stream capture (thread-local mode) on a private stream of the
  // current context and keeps the kernel launches it issued. enqueue returns false on its own
  // failure. nullopt when nothing can be kept (see the contract), with the reason in *why; the
  // capture is always ended.
  static std::optional<LaunchRecord> capture(const std::function<bool(CUstream)>& enqueue, std::string* why);

  // Issues the recorded launches on `stream` in order. Stops at the first launch the driver refuses
  // (an error a launch reports synchronously, such as an invalid configuration) and returns its error.
  CUresult replay(CUstream stream) const;

  size_t launches() const { return launches_.size(); }
  static std::string error_text(CUresult r);  // the driver's name for r

 private:
  struct Launch {
    CUfunction func = nullptr;
    unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
    unsigned shared_bytes = 0;
    std::vector<uint64_t> bytes;     // the parameter block, 8-byte aligned
    std::vector<uint32_t> offsets;   // each parameter's offset in it (cuFuncGetParamInfo order)
    size_t buffer_size = 0;          // nonzero: the block is passed whole (CU_LAUNCH_PARAM_BUFFER_*)
    std::vector<CUlaunchAttribute> attrs;
  };
  std::vector<Launch> launches_;
};

}  // namespace trident::runtime
