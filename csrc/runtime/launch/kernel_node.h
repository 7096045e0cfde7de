// A captured kernel node read in full: its function, launch shape and parameter block. What a
// LaunchRecord replays (launch_record.h) and what a graph's rebinding rewrites (graph_rebind.h).
#pragma once

#include <cuda.h>

#include <c10/util/SmallVector.h>

#include <cstdint>
#include <string>
#include <vector>

namespace trident::runtime {

struct KernelNode {
  CUDA_KERNEL_NODE_PARAMS params{};  // as the driver returned it; kernelParams/extra point into the node
  CUfunction func = nullptr;         // params.func, or the function of params.kern
  std::vector<uint64_t> bytes;       // the parameter block, 8-byte aligned, padding zero
  std::vector<uint32_t> offsets;     // each parameter's offset in it (cuFuncGetParamInfo order)
  size_t buffer_size = 0;            // nonzero: the launch passed the block whole (CU_LAUNCH_PARAM_BUFFER_*)

  // The node's parameters, or false with the reason in *why (a parameter the driver cannot describe,
  // an unreadable `extra`).
  static bool read(CUgraphNode node, KernelNode* out, std::string* why);

  // Pointers to each parameter in `block` (a copy of `bytes`), as kernelParams takes them.
  c10::SmallVector<void*, 32> param_pointers(const uint64_t* block) const;
};

}  // namespace trident::runtime
