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

import lt_problem

SRC = lt_problem.SRC + r"""
#include <ATen/cuda/CUDAEvent.h>
#include <algorithm>

// Rows of [device us, equal on all inputs (1/0), workspace bytes, heuristic waves], one per candidate.
std::vector<std::vector<double>> run(std::vector<at::Tensor> inputs, at::Tensor w, int64_t max_algos) {
  const int64_t M = inputs[0].size(0), K = inputs[0].size(1), N = w.size(0);
  const LtProblem lt(M, K, N, w.options(), int(max_algos));
  auto stream = at::cuda::getCurrentCUDAStream();
  std::vector<std::vector<double>> rows;
  for (size_t c = 0; c < lt.heur.size(); ++c) {
    const double ws = double(lt.heur[c].workspaceSize), waves = double(lt.heur[c].wavesCount);
    bool equal = true, ok = true;
    for (const auto& a : inputs) {
      auto out = at::empty({M, N}, a.options());
      if (lt.run(c, a, w, out) != CUBLAS_STATUS_SUCCESS) { ok = false; break; }
      equal = equal && at::equal(out, at::mm(a, w.t()));
    }
    if (!ok) {
      rows.push_back({-1.0, 0.0, ws, waves});
      continue;
    }
    auto out = at::empty({M, N}, inputs[0].options());
    std::vector<double> samples;
    for (int rep = 0; rep < 5; ++rep) {
      at::cuda::CUDAEvent start(cudaEventDefault), stop(cudaEventDefault);
      for (int i = 0; i < 20; ++i) lt.run(c, inputs[0], w, out);
      start.record(stream);
      for (int i = 0; i < 200; ++i) lt.run(c, inputs[0], w, out);
      stop.record(stream);
      stop.synchronize();
      samples.push_back(start.elapsed_time(stop) * 1000.0 / 200);
    }
    std::sort(samples.begin(), samples.end());
    rows.push_back({samples[2], equal ? 1.0 : 0.0, ws, waves});
  }
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
