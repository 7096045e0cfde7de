// A tensor over memory someone else owns: the graph's pool (a capture's recorded results), or a
// made-up address a capture never dereferences (graph_rebind.h's moved captures).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/from_blob.h>

#include <cstdint>

namespace trident::runtime {

// like's sizes, strides, storage offset and options, with its data pointer at `data`; owns nothing.
// The device is named, so PyTorch does not ask the driver which device the address belongs to.
inline at::Tensor tensor_over(const at::Tensor& like, uint64_t data) {
  const uint64_t base = data - static_cast<uint64_t>(like.storage_offset() * like.element_size());
  return at::for_blob(reinterpret_cast<void*>(base), like.sizes())
      .strides(like.strides())
      .storage_offset(like.storage_offset())
      .options(like.options())
      .target_device(like.device())
      .make_tensor();
}

}  // namespace trident::runtime
