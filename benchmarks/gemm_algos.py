"""Which cuBLASLt algorithms compute a decode GEMM with exactly at::mm's bits, and how fast each runs
on the device (GPU machine).

    python3 benchmarks/gemm_algos.py

For the decode step's GEMM shapes (bf16, out[M,N] = a[M,K] @ w[N,K]^T as PyTorch maps it onto
cuBLASLt), lists up to 16 of cuBLASLt's heuristic candidates with: device µs per GEMM (CUDA events
around 200 back-to-back launches, median of 5), whether the result equals at::mm's bit for bit on
three random inputs (random values, so a different summation order shows), and the workspace each
needs. Candidate 0 is the heuristic's first choice, the one at::mm and trident's cuBLASLt sites run.

A diagnostic for one question: is there device time to gain at batch 1 without changing a single
bit of the result (benchmarks/NOTES.md, session 4: the fixed-context target against torch.compile
needs less device time than eager's own)? It is not part of the benchmark suite.
"""
import os

import torch
from torch.utils.cpp_extension import load_inline

SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <cublasLt.h>
#include <algorithm>

namespace {
void check(cublasStatus_t s, const char* what) { TORCH_CHECK(s == CUBLAS_STATUS_SUCCESS, what, " failed: ", int(s)); }
}  // namespace

// Rows of [device us, equal on all inputs (1/0), workspace bytes, heuristic waves], one per candidate.
std::vector<std::vector<double>> run(std::vector<at::Tensor> inputs, at::Tensor w, int64_t max_algos) {
  const int64_t M = inputs[0].size(0), K = inputs[0].size(1), N = w.size(0);
  cublasLtHandle_t lt = at::cuda::getCurrentCUDABlasLtHandle();
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, lc;
  check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
  cublasOperation_t tr = CUBLAS_OP_T;
  check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &tr, sizeof(tr)), "transa");
  check(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, K, N, K), "la");
  check(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, K, M, K), "lb");
  check(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, N, M, N), "lc");
  size_t ws_size = 32 << 20;  // PyTorch's Hopper workspace
  auto ws = at::empty({int64_t(ws_size)}, w.options().dtype(at::kByte));
  cublasLtMatmulPreference_t pref;
  check(cublasLtMatmulPreferenceCreate(&pref), "pref");
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_size,
                                             sizeof(ws_size)), "ws");
  std::vector<cublasLtMatmulHeuristicResult_t> heur(max_algos);
  int found = 0;
  check(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, int(max_algos), heur.data(), &found),
        "heuristic");
  auto stream = at::cuda::getCurrentCUDAStream();
  const float alpha = 1.f, beta = 0.f;
  std::vector<std::vector<double>> rows;
  for (int c = 0; c < found; ++c) {
    auto launch = [&](const at::Tensor& a, at::Tensor& out) {
      return cublasLtMatmul(lt, desc, &alpha, w.data_ptr(), la, a.data_ptr(), lb, &beta, out.data_ptr(), lc,
                            out.data_ptr(), lc, &heur[c].algo, ws.data_ptr(), ws_size, stream);
    };
    bool equal = true, ok = true;
    for (const auto& a : inputs) {
      auto out = at::empty({M, N}, a.options());
      if (launch(a, out) != CUBLAS_STATUS_SUCCESS) { ok = false; break; }
      equal = equal && at::equal(out, at::mm(a, w.t()));
    }
    if (!ok) {
      rows.push_back({-1.0, 0.0, double(heur[c].workspaceSize), double(heur[c].wavesCount)});
      continue;
    }
    auto out = at::empty({M, N}, inputs[0].options());
    std::vector<double> samples;
    for (int rep = 0; rep < 5; ++rep) {
      at::cuda::CUDAEvent start(cudaEventDefault), stop(cudaEventDefault);
      for (int i = 0; i < 20; ++i) launch(inputs[0], out);
      start.record(stream);
      for (int i = 0; i < 200; ++i) launch(inputs[0], out);
      stop.record(stream);
      stop.synchronize();
      samples.push_back(start.elapsed_time(stop) * 1000.0 / 200);
    }
    std::sort(samples.begin(), samples.end());
    rows.push_back({samples[2], equal ? 1.0 : 0.0, double(heur[c].workspaceSize), double(heur[c].wavesCount)});
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(desc);
  return rows;
}
"""

# The decode step's GEMMs (benchmarks/models.py FULL): qkv, o, gate+up, down; batch 1 and 8.
SHAPES = [(m, k, n) for m in (1, 8) for k, n in [(2048, 6144), (2048, 2048), (2048, 11264), (5632, 2048)]]
NAMES = {(2048, 6144): "qkv", (2048, 2048): "o", (2048, 11264): "gate+up", (5632, 2048): "down"}


def main():
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})
    ext = load_inline("trident_gemm_algos", cpp_sources=SRC, functions=["run"], with_cuda=True, verbose=False)
    g = torch.Generator(device="cuda").manual_seed(0)
    print(f"{'gemm':16s} {'cand':>4s} {'device us':>10s} {'bits':>5s} {'workspace':>10s} {'waves':>6s}")
    for m, k, n in SHAPES:
        inputs = [torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16) for _ in range(3)]
        w = (torch.randn(n, k, device="cuda", generator=g) / k ** 0.5).to(torch.bfloat16)
        rows = ext.run(inputs, w, 16)
        best = min((r[0] for r in rows if r[1] and r[0] > 0), default=None)
        for c, (us, eq, ws, waves) in enumerate(rows):
            mark = "  <- fastest equal" if best is not None and us == best and c > 0 else ""
            print(f"{NAMES[(k, n)] + f' b{m}':16s} {c:4d} {us:10.2f} {'=' if eq else '!':>5s} {int(ws):10d} "
                  f"{waves:6.2f}{mark}")


if __name__ == "__main__":
    main()
