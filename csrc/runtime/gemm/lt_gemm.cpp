#include "runtime/gemm/lt_gemm.h"

#include <ATen/Context.h>
#include <ATen/ops/clone_ops.h>
#include <ATen/ops/mm_ops.h>
#include <ATen/ops/view_ops.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <vector>

#include "runtime/launch/cuda_driver.h"
#include "runtime/module/env_switch.h"
#include "runtime/replay/launch_record.h"
#include "runtime/module/reason_tally.h"
#include "runtime/graphs/spec_graphs.h"
#include "runtime/aten/tensor_bits.h"

namespace trident::runtime {
namespace {

namespace lt = cublaslt;

// The workspace the algorithm is chosen for, as PyTorch sizes its own cuBLAS workspace on Hopper:
// cuBLASLt's choice depends on the workspace allowed, and the first-call check confirms the choice
// matches at::mm's. What is allocated is what the chosen algorithm needs (Plan::workspace_bytes),
// often nothing at decode sizes.
constexpr size_t kWorkspaceBytes = 32u << 20;

// PyTorch's cuBLAS reduction settings (bool or enum depending on the version: compared as ints).
int reduction_settings() {
  auto& ctx = at::globalContext();
  return static_cast<int>(ctx.allowBF16ReductionCuBLAS()) | (static_cast<int>(ctx.allowFP16ReductionCuBLAS()) << 4) |
         (static_cast<int>(ctx.allowFP16AccumulationCuBLAS()) << 8);
}

// One workspace per (device, stream), kept for the process as PyTorch keeps its own: a workspace
// must not be shared by GEMMs that may run concurrently on different streams. It grows to the
// largest need of the sites using it; an outgrown one is kept too, because launches recorded with
// it (launch_record.h) go on using it (on the same stream, so never at once with the new one).
struct Workspace {
  int device;
  void* stream;
  size_t bytes;
  c10::DataPtr memory;
  std::vector<c10::DataPtr> outgrown;
};
std::mutex g_ws_mu;
// Never destroyed: freeing into the caching allocator during interpreter exit is not safe.
std::vector<Workspace>& workspaces() {
  static auto* w = new std::vector<Workspace>();
  return *w;
}

// At least `bytes` of workspace for (device, stream); nullptr when none is needed.
void* workspace(int device, void* stream, size_t bytes) {
  if (bytes == 0) return nullptr;
  std::lock_guard<std::mutex> lock(g_ws_mu);
  Workspace* w = nullptr;
  for (auto& c : workspaces())
    if (c.device == device && c.stream == stream) w = &c;
  if (!w) w = &workspaces().emplace_back(Workspace{device, stream, 0, c10::DataPtr(), {}});
  if (w->bytes < bytes) {
    if (w->memory) w->outgrown.push_back(std::move(w->memory));
    w->memory = c10::GetAllocator(c10::DeviceType::CUDA)->allocate(bytes);
    w->bytes = bytes;
  }
  return w->memory.get();
}

bool aligned(const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 256 == 0; }

// t's memory is the row-major [rows, cols] the plans take: 2-D with unit column stride and row stride
// cols (any, for one row), or contiguous N-D with cols last (a linear's [B, S, K] input, [B, S, N]
// result). The caller has checked numel = rows * cols for N-D.
bool rows_of(const at::Tensor& t, int64_t rows, int64_t cols) {
  if (t.dim() > 2) return t.size(-1) == cols && t.numel() == rows * cols && t.is_contiguous();
  return t.size(0) == rows && t.size(1) == cols && t.stride(1) == 1 && (rows == 1 || t.stride(0) == cols);
}

// The [rows, cols] view of t (rows_of holds), for the first call's comparison with at::mm.
at::Tensor as_2d(const at::Tensor& t, int64_t rows, int64_t cols) {
  if (t.dim() == 2) return t;
  const int64_t sizes[2] = {rows, cols};
  return at::_ops::view::call(t, c10::fromIntArrayRefSlow(sizes));
}

// b [K, N] as the plans take it: column-major (a weight [N, K] seen transposed), or row-major. A
// b that is both (K = N = 1) counts as column-major.
enum class BLayout : uint8_t { Column, Row, Other };
BLayout b_layout(const at::Tensor& b) {
  if (b.stride(0) == 1 && b.stride(1) == b.size(0)) return BLayout::Column;
  if (b.stride(1) == 1 && b.stride(0) == b.size(1)) return BLayout::Row;
  return BLayout::Other;
}

int data_type(c10::ScalarType s) { return s == c10::ScalarType::BFloat16 ? lt::kR16BF : lt::kR16F; }

bool replay_enabled() {
  static const bool on = env_switch_on("TRIDENT_CUBLASLT_REPLAY");
  return on;
}

ReasonTally& refusal_tally() {
  static auto* t = new ReasonTally();  // never destroyed (exit order)
  return *t;
}

void* current_stream(int device) { return cuda::current_stream(device); }

}  // namespace

std::vector<std::pair<std::string, int64_t>> replay_refusals() { return refusal_tally().snapshot(); }

void LtGemm::stop_replay(const std::string& why) const {
  record_.reset();
  replay_state_ = ReplayState::Off;
  refusal_tally().add(why);
}

bool LtGemm::make_plan(const at::Tensor& a, const at::Tensor& b, int64_t m, int device, Plan& p) const {
  const lt::Api* api = lt::api();
  lt::Handle h = lt::handle(device);
  if (!api || !h) return false;
  p.m = m;  // a's rows: the product of its leading sizes when it is N-D
  p.k = a.size(-1);
  p.n = b.size(1);
  p.b_row_major = b_layout(b) == BLayout::Row;
  p.dtype = a.scalar_type();
  p.device = device;
  p.reduction_settings = reduction_settings();
  // Column-major view of the row-major product: out^T [N, M] = b^T [N, K] x a^T [K, M], a's memory
  // being a column-major [K, M] (ld K). A weight's b (column-major [K, N], ld K) is taken transposed;
  // a row-major b's memory is already the column-major [N, K] (ld N) wanted.
  const int type = data_type(p.dtype);
  const int32_t trans_a = p.b_row_major ? lt::kOpN : lt::kOpT, trans_b = lt::kOpN;
  const bool layout_ok = p.b_row_major ? api->MatrixLayoutCreate(&p.la, type, p.n, p.k, p.n) == lt::kSuccess
                                       : api->MatrixLayoutCreate(&p.la, type, p.k, p.n, p.k) == lt::kSuccess;
  if (!layout_ok || api->MatmulDescCreate(&p.desc, lt::kCompute32F, lt::kR32F) != lt::kSuccess ||
      api->MatmulDescSetAttribute(p.desc, lt::kDescTransA, &trans_a, sizeof trans_a) != lt::kSuccess ||
      api->MatmulDescSetAttribute(p.desc, lt::kDescTransB, &trans_b, sizeof trans_b) != lt::kSuccess ||
      api->MatrixLayoutCreate(&p.lb, type, p.k, p.m, p.k) != lt::kSuccess ||
      api->MatrixLayoutCreate(&p.lc, type, p.n, p.m, p.n) != lt::kSuccess)
    return false;
  lt::Pref pref = nullptr;
  if (api->MatmulPreferenceCreate(&pref) != lt::kSuccess) return false;
  const uint64_t ws = kWorkspaceBytes;
  lt::HeuristicResult result{};
  int found = 0;
  const bool ok = api->MatmulPreferenceSetAttribute(pref, lt::kPrefMaxWorkspaceBytes, &ws, sizeof ws) == lt::kSuccess &&
                  api->MatmulAlgoGetHeuristic(h, p.desc, p.la, p.lb, p.lc, p.lc, pref, 1, &result, &found) ==
                      lt::kSuccess &&
                  found == 1 && result.workspace_size <= kWorkspaceBytes;
  api->MatmulPreferenceDestroy(pref);
  p.algo = result.algo;
  p.workspace_bytes = result.workspace_size;
  return ok;
}

LtGemm::LtGemm() = default;
LtGemm::~LtGemm() = default;

LtGemm::Args LtGemm::args_of(const Plan& p, const at::Tensor& a, const at::Tensor& b, at::Tensor& out) const {
  return {a.data_ptr(), b.data_ptr(), out.data_ptr(), current_stream(p.device)};
}

bool LtGemm::enqueue(const Plan& p, const Args& x, void* stream) const {
  const float alpha = 1.f, beta = 0.f;
  // x.stream's workspace even when issued on another stream (the capture in try_record), so that
  // the launches are exactly those of a call on x.stream.
  return lt::api()->Matmul(lt::handle(p.device), p.desc, &alpha, x.b, p.la, x.a, p.lb, &beta, x.out, p.lc, x.out,
                           p.lc, &p.algo, workspace(p.device, x.stream, p.workspace_bytes), p.workspace_bytes,
                           stream) == lt::kSuccess;
}

bool LtGemm::run_ready(const Plan& p, const Args& x, at::Tensor& out) const {
  if (record_ && recorded_ == x) {
    const CUresult r = record_->replay(static_cast<CUstream>(x.stream));
    if (r == CUDA_SUCCESS) return true;
    stop_replay("the driver refused a recorded launch: " + LaunchRecord::error_text(r));  // cuBLASLt for good
  }
  if (!enqueue(p, x, x.stream)) return false;
  if (in_graph_capture()) return true;  // a graph capture holds this call: record nothing
  if (replay_state_ == ReplayState::Open && last_ == x) try_record(p, x, out);
  last_ = x;
  return true;
}

void LtGemm::try_record(const Plan& p, const Args& x, at::Tensor& out) const {
  if (++records_ >= kMaxRecords) replay_state_ = ReplayState::Closed;
  std::string why;
  std::optional<LaunchRecord> rec =
      LaunchRecord::capture([&](CUstream side) { return enqueue(p, x, side); }, &why);
  if (!rec) return stop_replay(why);  // this call cannot be recorded; others of the site would not be either
  // out holds cuBLASLt's result: the first replay must reproduce it bit for bit.
  const at::Tensor expected = at::_ops::clone::call(out, std::nullopt);
  const CUresult r = rec->replay(static_cast<CUstream>(x.stream));
  if (r != CUDA_SUCCESS || !equal_bits(out, expected)) {
    out.copy_(expected);
    return stop_replay(r != CUDA_SUCCESS ? "the driver refused a recorded launch: " + LaunchRecord::error_text(r)
                                         : "a first replay differed from cuBLASLt's result");
  }
  record_ = std::make_unique<LaunchRecord>(std::move(*rec));
  recorded_ = x;
}

bool LtGemm::replaying() const {
  std::lock_guard<std::mutex> lock(mu_);
  return record_ != nullptr;
}

bool LtGemm::run(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) const {
  const State st = state();
  if (st == State::Declined || !a.is_cuda()) return false;
  const c10::ScalarType dtype = a.scalar_type();
  if ((dtype != c10::ScalarType::BFloat16 && dtype != c10::ScalarType::Half) || b.scalar_type() != dtype ||
      out.scalar_type() != dtype)
    return false;
  if (a.dim() < 2 || b.dim() != 2 || out.dim() != a.dim()) return false;
  const int64_t k = a.size(-1), n = b.size(1);
  if (k == 0 || n == 0 || b.size(0) != k) return false;
  const int64_t m = a.numel() / k;
  const BLayout layout = b_layout(b);
  if (m == 0 || !rows_of(a, m, k) || !rows_of(out, m, n) || layout == BLayout::Other || !aligned(a) || !aligned(b) ||
      !aligned(out))
    return false;
  const int device = a.get_device();
  if (b.get_device() != device || out.get_device() != device ||
      c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getDevice().index() != device)
    return false;

  if (st == State::Ready) {
    const Plan& p = plan_;
    if (p.m != m || p.n != n || p.k != k || p.dtype != dtype || p.device != device ||
        p.b_row_major != (layout == BLayout::Row))
      return false;
    if (p.reduction_settings != reduction_settings()) {  // eager would choose differently now
      state_.store(State::Declined, std::memory_order_release);
      return false;
    }
    std::lock_guard<std::mutex> lock(mu_);
    return run_ready(p, args_of(p, a, b, out), out);
  }

  // First call: plan, run both, keep cuBLASLt only when its bits are at::mm's (never in a graph
  // capture, where nothing runs to compare).
  if (in_graph_capture()) return false;
  std::lock_guard<std::mutex> lock(mu_);
  if (state() != State::Unplanned) return false;  // another thread decided meanwhile; ATen this once
  Plan p;
  if (!make_plan(a, b, m, device, p) || !enqueue(p, args_of(p, a, b, out), current_stream(device))) {
    state_.store(State::Declined, std::memory_order_release);
    return false;
  }
  const at::Tensor expected = at::_ops::mm::call(as_2d(a, m, k), b);
  at::Tensor out_2d = as_2d(out, m, n);
  if (!equal_bits(out_2d, expected)) {
    out_2d.copy_(expected);
    state_.store(State::Declined, std::memory_order_release);
    return true;  // out holds eager's result
  }
  plan_ = p;
  if (!replay_enabled()) replay_state_ = ReplayState::Off;
  last_ = args_of(p, a, b, out);
  state_.store(State::Ready, std::memory_order_release);
  return true;
}

}  // namespace trident::runtime
