// Bit-for-bit comparison of two tensors' elements, the contract of every first-call check that
// keeps a faster path only when it gives eager's result (cuBLASLt's plan and launch replay,
// lt_gemm.h; ATen op replay, op_replay.h). Equal values are not enough: -0.0 and 0.0 differ, and
// NaNs with equal payloads match.
#pragma once

#include <ATen/core/Tensor.h>

namespace trident::runtime {

// Same dtype and sizes, and each element the same bits (strides may differ). False for undefined
// tensors and for element sizes other than 1, 2, 4 and 8 bytes.
bool equal_bits(const at::Tensor& a, const at::Tensor& b);

}  // namespace trident::runtime
