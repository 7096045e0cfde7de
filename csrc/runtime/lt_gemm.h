// One mm/linear call site's GEMM through cuBLASLt, with its descriptors and algorithm chosen once.
// On an H200, at::mm spends 3-8 µs more host time per decode-step GEMM than cublasLtMatmul with a
// kept algorithm, with the same bits out (benchmarks/gemm_host.py, benchmarks/NOTES.md session 3).
//
// Contract: results are eager's. A plan's first call also runs at::mm and compares bit for bit;
// a difference, a cuBLASLt error, or a change of PyTorch's cuBLAS reduction settings after that
// check turns the site over to ATen for good. Calls the plan does not fit (another shape, dtype,
// layout, alignment or device) go to ATen too.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <mutex>

#include "runtime/cublaslt.h"

namespace trident::runtime {

class LtGemm {
 public:
  enum class State : uint8_t { Unplanned, Ready, Declined };

  // out = a @ b for a [M, K] row-major, b [K, N] column-major (a weight [N, K] seen transposed) and
  // out [M, N] contiguous, all fp16 or bf16 on the current CUDA device. Returns false, having done
  // nothing, when the caller must run ATen instead.
  bool run(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) const;

  State state() const { return state_.load(std::memory_order_acquire); }

 private:
  struct Plan {
    int64_t m = 0, n = 0, k = 0;
    c10::ScalarType dtype = c10::ScalarType::Undefined;
    int device = -1;
    int reduction_settings = 0;  // PyTorch's cuBLAS reduction flags when the plan was checked
    cublaslt::Desc desc = nullptr;
    cublaslt::Layout la = nullptr, lb = nullptr, lc = nullptr;
    cublaslt::Algo algo{};
  };
  bool make_plan(const at::Tensor& a, const at::Tensor& b, int device, Plan& p) const;
  bool launch(const Plan& p, const at::Tensor& a, const at::Tensor& b, at::Tensor& out) const;

  mutable std::atomic<State> state_{State::Unplanned};
  mutable std::mutex mu_;  // planning and the first-call check
  mutable Plan plan_;      // written once, under mu_, before state_ becomes Ready
};

}  // namespace trident::runtime
