// How typed ATen entry points (aten_typed.cpp, aten_typed_gemm.cpp) hand out their result: a buffer
// the module kept (buffer_reuse.h) or a fresh one, and the reuse keys they share. Internal to the
// runtime's typed entry points.
#pragma once

#include <ATen/core/Tensor.h>

#include "runtime/aten/aten_site.h"
#include "runtime/memory/buffer_reuse.h"
#include "runtime/module/loaded_module.h"

namespace trident::runtime::typed {

using P = ArgPlan::Kind;

// Allocation sites and ops with an out= variant hand out a buffer the module kept when `may_reuse`,
// the run keeps buffers (f.keeps_buffers: no Python dispatch mode sees it, buffer_reuse.h) and one
// may serve this request (same key, nothing else holds it: buffer_reuse.h); `into` then
// writes the result into it (nothing, for an allocation). Otherwise `fresh()` allocates and, when
// `may_reuse`, its result is kept for later requests. A key holds everything the result's
// sizes, strides, dtype and device are a function of, so a reused buffer is exactly the tensor the
// functional op would return.
template <typename Fresh, typename Into>
void reuse_or_allocate(const AtenSite& s, trd_frame& f, const ReusePool::Key& key, bool may_reuse,
                       Fresh fresh, Into into) {
  ReusePool& pool = *f.pool;
  may_reuse = may_reuse && f.keeps_buffers;
  if (at::Tensor* kept = may_reuse ? pool.take(s.reuse, key) : nullptr) {
    into(*kept);
    s.set_result(f, 0, *kept);
    return;
  }
  at::Tensor t = fresh();
  if (may_reuse) pool.keep(s.reuse, t, key);
  s.set_result(f, 0, std::move(t));
}

// out= ops reuse only in runs that record no autograd history: out= refuses inputs that require
// grad, and a kept result must not hold a graph alive.
template <typename Fresh, typename Into>
void produce(const AtenSite& s, trd_frame& f, const ReusePool::Key& key, Fresh fresh, Into into) {
  reuse_or_allocate(s, f, key, f.below_autograd, fresh, into);
}

inline void push_device(ReusePool::Key& key, const at::Tensor& t) {
  key.push_back(static_cast<int64_t>(t.scalar_type()));
  key.push_back(static_cast<int64_t>(t.device().type()));
  key.push_back(t.device().index());
}

// [n, k] @ [k, m] -> contiguous [n, m] in a's dtype on a's device.
inline ReusePool::Key matmul_key(const at::Tensor& a, int64_t m) {
  ReusePool::Key key{a.size(0), m};
  push_device(key, a);
  return key;
}

}  // namespace trident::runtime::typed
