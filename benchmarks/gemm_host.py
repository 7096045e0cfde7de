"""How much of a decode GEMM's host time is PyTorch's and how much is cuBLAS's (GPU machine).

    python3 benchmarks/gemm_host.py

Times, per call from one pinned thread, `at::mm_out` against `cublasGemmEx` with PyTorch's handle
fetched every call or once, and `cublasLtMatmul` with its algorithm chosen once, for the decode
step's GEMM shapes; and checks each result bit for bit against `at::mm`. A diagnostic for deciding
whether trident should call cuBLAS itself: it is not part of the benchmark suite.
"""
import os

import torch
from torch.utils.cpp_extension import load_inline

import lt_problem

SRC = lt_problem.SRC + r"""
#include <cublas_v2.h>
#include <chrono>

namespace {
double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// out[M,N] = a[M,K] @ w[N,K]^T, all bf16 row-major, as PyTorch's addmm maps it onto column-major cuBLAS.
void gemm_ex(cublasHandle_t h, at::Tensor& out, const at::Tensor& a, const at::Tensor& w) {
  const int M = a.size(0), K = a.size(1), N = w.size(0);
  float alpha = 1.f, beta = 0.f;
  check(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, w.data_ptr(), CUDA_R_16BF, K, a.data_ptr(),
                     CUDA_R_16BF, K, &beta, out.data_ptr(), CUDA_R_16BF, N, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT_TENSOR_OP), "cublasGemmEx");
}
}  // namespace

std::vector<double> run(at::Tensor a, at::Tensor w, int64_t n) {
  auto wt = w.t();
  auto ref = at::mm(a, wt);
  std::vector<double> r;
  auto time = [&](auto&& body) {
    for (int i = 0; i < 50; ++i) body();
    at::cuda::device_synchronize();
    double t0 = now_us();
    for (int64_t i = 0; i < n; ++i) body();
    at::cuda::device_synchronize();
    r.push_back((now_us() - t0) / n);
  };
  auto out = at::empty_like(ref);
  time([&] { at::mm_out(out, a, wt); });
  r.push_back(at::equal(out, ref));
  out.zero_();
  time([&] { gemm_ex(at::cuda::getCurrentCUDABlasHandle(), out, a, w); });
  r.push_back(at::equal(out, ref));
  out.zero_();
  cublasHandle_t h = at::cuda::getCurrentCUDABlasHandle();
  time([&] { gemm_ex(h, out, a, w); });
  r.push_back(at::equal(out, ref));
  time([&] { (void)at::cuda::getCurrentCUDABlasHandle(); });
  r.push_back(1);

  // cublasLt with descriptors and the heuristic's first algorithm chosen once
  const LtProblem lt(a.size(0), a.size(1), w.size(0), a.options(), 1);
  out.zero_();
  time([&] { check(lt.run(0, a, w, out), "cublasLtMatmul"); });
  r.push_back(at::equal(out, ref));
  return r;
}
"""


def main():
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})
    # cuBLAS symbols resolve through libtorch_cuda's own dependency on it (no link flags needed)
    ext = load_inline("trident_gemm_host", cpp_sources=SRC, functions=["run"], with_cuda=True, verbose=False)
    print(f"{'shape':28s} {'at::mm':>8s} {'GemmEx+handle':>14s} {'GemmEx':>8s} {'handle':>7s} {'Lt cached':>10s}  "
          "(us/call; = bitwise equal to at::mm)")
    for m, k, n in [(1, 2048, 6144), (1, 2048, 2048), (1, 2048, 11264), (1, 5632, 2048), (8, 2048, 6144),
                    (1, 512, 512)]:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
        r = ext.run(a, w, 2000)
        eq = lambda v: "=" if v else "!"  # noqa: E731
        print(f"[{m},{k}]x[{k},{n}]".ljust(28) + f" {r[0]:8.2f}{eq(r[1])} {r[2]:13.2f}{eq(r[3])} {r[4]:7.2f}{eq(r[5])}"
              f" {r[6]:7.2f} {r[8]:9.2f}{eq(r[9])}")


if __name__ == "__main__":
    main()
