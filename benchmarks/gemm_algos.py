"""Which cuBLASLt algorithms compute a decode GEMM with exactly at::mm's bits, and what each costs on
the device and on the host (GPU machine).

    python3 benchmarks/gemm_algos.py

For the decode step's GEMM shapes (bf16, out[M,N] = a[M,K] @ w[N,K]^T as PyTorch maps it onto
cuBLASLt), lists up to 16 of cuBLASLt's heuristic candidates with: device µs per GEMM (a CUDA graph
of 50 calls replayed between events, median of 7), host µs per call (the time to enqueue 200 calls,
median of 5; before session 5 the two were one figure, whichever was larger), whether the result
equals at::mm's bit for bit on three random inputs (random values, so a different summation order
shows), and the workspace each needs. Candidate 0 is the heuristic's first choice, the one at::mm
and trident's cuBLASLt sites run.

A diagnostic for one question: is there device or host time to gain without changing a single bit
of the result (benchmarks/NOTES.md, sessions 4 and 5)? It is not part of the benchmark suite.
"""
import os

import torch
from torch.utils.cpp_extension import load_inline

import lt_problem

SRC = lt_problem.SRC + r"""
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <algorithm>
#include <chrono>

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Device µs per GEMM: 50 calls captured into a CUDA graph, replayed between events (no host cost).
static double device_us(const LtProblem& lt, size_t c, const at::Tensor& a, const at::Tensor& w, at::Tensor& out) {
  auto side = at::cuda::getStreamFromPool();
  c10::cuda::CUDAStreamGuard guard(side);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  TORCH_CHECK(cudaStreamBeginCapture(side, cudaStreamCaptureModeThreadLocal) == cudaSuccess, "capture");
  for (int i = 0; i < 50; ++i) lt.run(c, a, w, out);
  TORCH_CHECK(cudaStreamEndCapture(side, &graph) == cudaSuccess, "end capture");
  TORCH_CHECK(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess, "instantiate");
  std::vector<double> samples;
  for (int rep = 0; rep < 7; ++rep) {
    at::cuda::CUDAEvent start(cudaEventDefault), stop(cudaEventDefault);
    start.record(side);
    cudaGraphLaunch(exec, side);
    stop.record(side);
    stop.synchronize();
    samples.push_back(start.elapsed_time(stop) * 1000.0 / 50);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return median(samples);
}

// Host µs per call: the wall time to enqueue 200 calls right after a sync (the device queue does not
// fill at 200), median of 5.
static double host_us(const LtProblem& lt, size_t c, const at::Tensor& a, const at::Tensor& w, at::Tensor& out) {
  std::vector<double> samples;
  for (int rep = 0; rep < 5; ++rep) {
    at::cuda::getCurrentCUDAStream().synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 200; ++i) lt.run(c, a, w, out);
    const auto t1 = std::chrono::steady_clock::now();
    samples.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 200);
  }
  at::cuda::getCurrentCUDAStream().synchronize();
  return median(samples);
}

// Rows of [device us, host us, equal on all inputs (1/0), workspace bytes, heuristic waves], one per
// candidate; device us -1 where the candidate failed to run.
std::vector<std::vector<double>> run(std::vector<at::Tensor> inputs, at::Tensor w, int64_t max_algos) {
  const int64_t M = inputs[0].size(0), K = inputs[0].size(1), N = w.size(0);
  const LtProblem lt(M, K, N, w.options(), int(max_algos));
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
      rows.push_back({-1.0, -1.0, 0.0, ws, waves});
      continue;
    }
    auto out = at::empty({M, N}, inputs[0].options());
    for (int i = 0; i < 20; ++i) lt.run(c, inputs[0], w, out);
    rows.push_back({device_us(lt, c, inputs[0], w, out), host_us(lt, c, inputs[0], w, out), equal ? 1.0 : 0.0, ws, waves});
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
    print(f"{'gemm':16s} {'cand':>4s} {'device us':>10s} {'host us':>8s} {'bits':>5s} {'workspace':>10s} {'waves':>6s}")
    for m, k, n in SHAPES:
        inputs = [torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16) for _ in range(3)]
        w = (torch.randn(n, k, device="cuda", generator=g) / k ** 0.5).to(torch.bfloat16)
        rows = ext.run(inputs, w, 16)
        best = min((r[0] for r in rows if r[1] and r[0] > 0), default=None)
        for c, (us, host, eq, ws, waves) in enumerate(rows):
            mark = "  <- fastest equal" if best is not None and us == best and c > 0 else ""
            print(f"{NAMES[(k, n)] + f' b{m}':16s} {c:4d} {us:10.2f} {host:8.2f} {'=' if eq else '!':>5s} {int(ws):10d} "
                  f"{waves:6.2f}{mark}")


if __name__ == "__main__":
    main()
