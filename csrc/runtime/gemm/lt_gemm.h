// One mm/linear call site's GEMM through cuBLASLt, with its descriptors and algorithm chosen once.
// On an H200, at::mm spends 3-8 µs more host time per decode-step GEMM than cublasLtMatmul with a
// kept algorithm, with the same bits out (benchmarks/gemm_host.py, benchmarks/NOTES.md session 3).
//
// Contract: results are eager's. A plan's first call also runs at::mm and compares bit for bit;
// a difference, a cuBLASLt error, or a change of PyTorch's cuBLAS reduction settings after that
// check turns the site over to ATen for good. Calls the plan does not fit (another shape, dtype,
// layout, alignment or device) go to ATen too.
//
// Replay: when a site is called twice in a row with the same pointers and stream (as
// the decode step's GEMMs are, their inputs and outputs being reused buffers, buffer_reuse.h), the
// launches cublasLtMatmul issued are recorded (launch_record.h) and, while those arguments repeat,
// issued again without cuBLASLt's host work. The first replay's output is compared bit for bit
// with cuBLASLt's; a difference, a refused launch or a call that cannot be recorded ends replay for
// the site. A site records at most kMaxRecords times (arguments that keep changing stop it).
// TRIDENT_CUBLASLT_REPLAY=0 turns replay off (read once, python/trident/config.py documents it).
// Why a site stopped replaying is kept process-wide (replay_refusals(), shown by trident.explain).
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/gemm/cublaslt.h"

namespace trident::runtime {

class LaunchRecord;  // launch_record.h (runtime-private: it needs cuda.h)

// Each distinct reason a cuBLASLt site of this process stopped replaying (or never started), with
// how many sites gave it; at most 16 reasons are kept.
std::vector<std::pair<std::string, int64_t>> replay_refusals();

class LtGemm {
 public:
  LtGemm();
  ~LtGemm();

  enum class State : uint8_t { Unplanned, Ready, Declined };

  // out = a @ b for a [M, K] row-major, b [K, N] column-major (a weight [N, K] seen transposed) or
  // row-major, and out [M, N] contiguous, all fp16 or bf16 on the current CUDA device. a and out may
  // also be contiguous N-D tensors of one rank, [..., K] and [..., N], whose memory is those [M, K]
  // and [M, N] (a linear's input and result, multiplied without flattening views). Returns false,
  // having done nothing, when the caller must run ATen instead.
  bool run(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) const;

  State state() const { return state_.load(std::memory_order_acquire); }
  // Whether the site issues recorded launches now (for counters()).
  bool replaying() const;

  static constexpr int kMaxRecords = 4;

 private:
  struct Plan {
    int64_t m = 0, n = 0, k = 0;
    bool b_row_major = false;
    c10::ScalarType dtype = c10::ScalarType::Undefined;
    int device = -1;
    int reduction_settings = 0;  // PyTorch's cuBLAS reduction flags when the plan was checked
    cublaslt::Desc desc = nullptr;
    cublaslt::Layout la = nullptr, lb = nullptr, lc = nullptr;
    cublaslt::Algo algo{};
    size_t workspace_bytes = 0;  // what `algo` needs (the heuristic's answer), allocated per stream
  };
  // Everything one cublasLtMatmul call depends on besides the plan. The workspace is not here: it
  // is a function of (device, stream), kept for the process, and looked up only when cuBLASLt runs.
  struct Args {
    const void *a = nullptr, *b = nullptr;
    void *out = nullptr, *stream = nullptr;
    bool operator==(const Args& o) const { return a == o.a && b == o.b && out == o.out && stream == o.stream; }
  };
  enum class ReplayState : uint8_t { Open, Closed, Off };  // may record / keeps its record / never replays

  bool make_plan(const at::Tensor& a, const at::Tensor& b, int64_t m, int device, Plan& p) const;
  Args args_of(const Plan& p, const at::Tensor& a, const at::Tensor& b, at::Tensor& out) const;
  bool enqueue(const Plan& p, const Args& x, void* stream) const;
  bool run_ready(const Plan& p, const Args& x, at::Tensor& out) const;  // under mu_
  void try_record(const Plan& p, const Args& x, at::Tensor& out) const;  // under mu_
  void stop_replay(const std::string& why) const;                         // under mu_

  mutable std::atomic<State> state_{State::Unplanned};
  mutable std::mutex mu_;  // planning, the first-call check, and the replay state below
  mutable Plan plan_;      // written once, under mu_, before state_ becomes Ready
  mutable ReplayState replay_state_ = ReplayState::Open;
  mutable std::optional<Args> last_;     // the previous call's arguments
  mutable std::optional<Args> recorded_;  // the arguments `record_` was captured with
  mutable std::unique_ptr<LaunchRecord> record_;
  mutable int records_ = 0;
};

}  // namespace trident::runtime
