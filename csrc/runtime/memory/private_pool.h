// Routing the calling thread's CUDA allocations to a private memory pool of PyTorch's caching
// allocator, as torch.cuda.graph does during a capture: what op_replay.h needs so that a recorded
// ATen call's outputs and workspace stay memory no one else is given.
//
// The runtime does not link c10_cuda (it builds against CPU-only torch and reaches the driver with
// dlopen), so the functions come from Python: trident._compat.private_pool_api() wraps PyTorch's
// own (torch._C._cuda_beginAllocateCurrentThreadToPool and friends) and the bindings install them
// at import. Absent (never installed, or a torch without them), nothing is recorded.
//
// Contract: begin() routes the thread's allocations on `device` to a private pool until end() and
// counts one use of it; release() gives that use back. Recordings for one (device, caller stream)
// share a pool where that is safe (python/trident/recording_pools.py says when), so a model's
// replay sites take one pool's segments, not one each. Called from a run, which holds no GIL: the
// bindings' functions take it themselves; they never throw: false (begin) or nothing (end,
// release) when Python raised, the error cleared.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace trident::runtime {

using PoolId = std::array<uint64_t, 2>;  // PyTorch's MempoolId_t

struct PrivatePoolApi {
  std::function<bool(int device, void* stream, PoolId* pool)> begin;
  std::function<void(int device, const PoolId& pool)> end;
  std::function<void(int device, const PoolId& pool)> release;
  // The pool's segments as [begin, end) address ranges (graph_rebind.h tells a graph's own memory
  // from its arguments'); empty when unknown. Optional.
  std::function<std::vector<std::pair<uint64_t, uint64_t>>(int device, const PoolId& pool)> segments;
};

void set_private_pool_api(PrivatePoolApi api);
const PrivatePoolApi* private_pool_api();  // nullptr until installed

}  // namespace trident::runtime
