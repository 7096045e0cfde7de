"""C++ shared by the GEMM diagnostics (gemm_host.py, gemm_algos.py), compiled into each with
load_inline: one decode GEMM as PyTorch maps it onto cuBLASLt, with the heuristic's candidates."""

SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cublasLt.h>
#include <vector>

inline void check(cublasStatus_t s, const char* what) {
  TORCH_CHECK(s == CUBLAS_STATUS_SUCCESS, what, " failed: ", int(s));
}

// out[M,N] = a[M,K] @ w[N,K]^T, all bf16 row-major, on column-major cuBLASLt as PyTorch maps it:
// descriptors, PyTorch's Hopper workspace (32 MiB) and up to `max_algos` heuristic candidates
// (candidate 0 is the heuristic's first choice, the one at::mm runs).
struct LtProblem {
  cublasLtHandle_t lt = at::cuda::getCurrentCUDABlasLtHandle();
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  size_t ws_size = 32 << 20;
  at::Tensor ws;
  std::vector<cublasLtMatmulHeuristicResult_t> heur;

  LtProblem(int64_t M, int64_t K, int64_t N, const at::TensorOptions& opts, int max_algos) {
    check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
    cublasOperation_t tr = CUBLAS_OP_T;
    check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &tr, sizeof(tr)), "transa");
    check(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, K, N, K), "la");
    check(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, K, M, K), "lb");
    check(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, N, M, N), "lc");
    ws = at::empty({int64_t(ws_size)}, opts.dtype(at::kByte));
    cublasLtMatmulPreference_t pref;
    check(cublasLtMatmulPreferenceCreate(&pref), "pref");
    check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_size,
                                               sizeof(ws_size)), "ws");
    heur.resize(max_algos);
    int found = 0;
    check(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, max_algos, heur.data(), &found),
          "heuristic");
    cublasLtMatmulPreferenceDestroy(pref);
    TORCH_CHECK(found >= 1, "no cublasLt algorithm");
    heur.resize(found);
  }
  ~LtProblem() {
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(desc);
  }
  // out = a @ w^T with candidate c, on the current stream.
  cublasStatus_t run(size_t c, const at::Tensor& a, const at::Tensor& w, at::Tensor& out) const {
    const float alpha = 1.f, beta = 0.f;
    return cublasLtMatmul(lt, desc, &alpha, w.data_ptr(), la, a.data_ptr(), lb, &beta, out.data_ptr(), lc,
                          out.data_ptr(), lc, &heur[c].algo, ws.data_ptr(), ws_size,
                          at::cuda::getCurrentCUDAStream());
  }
};
"""
