#include "runtime/replay/op_replay.h"

#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <atomic>
#include <exception>

#include "runtime/launch/cuda_driver.h"
#include "runtime/module/env_switch.h"
#include "runtime/replay/launch_record.h"
#include "runtime/module/reason_tally.h"
#include "runtime/aten/tensor_bits.h"

namespace trident::runtime {
namespace {

using P = ArgPlan::Kind;

std::atomic<bool>& replay_switch() {
  static std::atomic<bool> on{env_switch_on("TRIDENT_ATEN_REPLAY")};
  return on;
}

ReasonTally& refusal_tally() {
  static auto* t = new ReasonTally();  // never destroyed (exit order)
  return *t;
}

const c10::impl::DeviceGuardImplInterface* cuda_impl() { return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA); }

// The kept returns are what ATen returned, layout included: same strides, then the same bits.
bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  return a.defined() && b.defined() && a.strides() == b.strides() && equal_bits(a, b);
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

}  // namespace

std::shared_ptr<OpReplay> OpReplay::for_site(const AtenSite& site) {
  if (!replay_switch().load() || site.name != "aten::_scaled_dot_product_cudnn_attention") return nullptr;
  // (query, key, value, attn_bias, compute_log_sumexp, dropout_p, is_causal, return_debug_mask, *, scale)
  const auto& a = site.args;
  if (a.size() != 9 || a[4].kind != P::Const || !a[4].constant.isBool() || a[5].kind != P::Const ||
      !a[5].constant.isDouble() || a[5].constant.toDouble() != 0.0 || a[7].kind != P::Const ||
      !a[7].constant.isBool() || a[7].constant.toBool())
    return nullptr;  // dropout draws random numbers a replay would repeat; a debug mask is not kept
  std::vector<size_t> valued{0};  // the output; the logsumexp too when asked for
  if (a[4].constant.toBool()) valued.push_back(1);
  return std::shared_ptr<OpReplay>(new OpReplay(std::move(valued)));
}

OpReplay::OpReplay(std::vector<size_t> valued) : valued_(std::move(valued)) {}
OpReplay::~OpReplay() { drop_record(); }

std::vector<std::pair<std::string, int64_t>> OpReplay::refusals() { return refusal_tally().snapshot(); }

bool OpReplay::set_enabled_for_new_modules(bool on) { return replay_switch().exchange(on); }

bool OpReplay::key_of(const AtenSite& s, const trd_frame& f, const int64_t* dyn, Key& key, int* device,
                      void** stream) const {
  if (!(f.below_autograd && f.keeps_buffers)) return false;
  key.clear();
  int dev = -1;
  for (size_t k = 0; k < s.args.size(); ++k) {
    const ArgPlan& p = s.args[k];
    switch (p.kind) {
      case P::Const: break;
      case P::Tensor: {
        const at::Tensor& t = s.tensor(f, k);
        if (!t.defined() || !t.is_cuda() || t.layout() != c10::kStrided) return false;
        if (dev < 0) dev = t.get_device();
        if (t.get_device() != dev) return false;
        key.push_back(reinterpret_cast<int64_t>(t.data_ptr()));
        key.push_back(static_cast<int64_t>(t.scalar_type()));
        key.push_back(t.dim());
        key.append(t.sizes().begin(), t.sizes().end());
        key.append(t.strides().begin(), t.strides().end());
        break;
      }
      case P::Sym:
      case P::SymFloat:
      case P::SymTensor:
      case P::Float:
      case P::FloatTensor: key.push_back(dyn[p.ref.i]); break;
      case P::IntList:
        for (const auto& it : p.items) key.push_back(it.kind == ir::Operand::Kind::Sym ? dyn[it.i] : it.i);
        break;
      case P::TensorList:
      case P::OptTensorList: return false;
    }
  }
  if (dev < 0 || cuda_impl()->getDevice().index() != dev) return false;
  const auto& d = cuda::driver();
  CUstream st = cuda::current_stream(dev);
  CUstreamCaptureStatus capturing = CU_STREAM_CAPTURE_STATUS_NONE;
  if (!d.capture_api() || d.StreamIsCapturing(st, &capturing) != CUDA_SUCCESS ||
      capturing != CU_STREAM_CAPTURE_STATUS_NONE)
    return false;  // a caller's own capture takes the ATen call, allocations and all
  key.push_back(dev);
  key.push_back(reinterpret_cast<int64_t>(st));
  *device = dev;
  *stream = st;
  return true;
}

bool OpReplay::kept_free() const {
  for (const c10::IValue& v : kept_) {
    if (!v.isTensor()) continue;
    const at::Tensor& t = v.toTensor();
    if (t.defined() && (t.use_count() != 1 || (t.has_storage() && t.storage().use_count() != 1))) return false;
  }
  return true;
}

bool OpReplay::replaying() const {
  std::lock_guard<std::mutex> lock(mu_);
  return record_ != nullptr;
}

bool OpReplay::before(const AtenSite& s, trd_frame& f, const int64_t* dyn) {
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock() || !record_) return false;
  Key key;
  int device = -1;
  void* stream = nullptr;
  if (!key_of(s, f, dyn, key, &device, &stream) || key != *recorded_ || !kept_free()) return false;
  if (const CUresult r = record_->replay(static_cast<CUstream>(stream)); r != CUDA_SUCCESS) {
    stop("the driver refused a recorded launch: " + LaunchRecord::error_text(r));
    return false;  // ATen runs it (what the refused launches wrote is the site's own memory)
  }
  torch::jit::Stack returns = kept_;  // the same tensors, one more reference each for the frame
  s.store_returns(f, returns);
  last_ = std::move(key);
  return true;
}

void OpReplay::after(const AtenSite& s, trd_frame& f, const int64_t* dyn) {
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock() || state_ != State::Open) return;
  Key key;
  int device = -1;
  void* stream = nullptr;
  if (!key_of(s, f, dyn, key, &device, &stream)) return last_.reset();
  if (last_ && *last_ == key) try_record(s, f, dyn, key, device, stream);
  last_ = std::move(key);
}

void OpReplay::try_record(const AtenSite& s, trd_frame& f, const int64_t* dyn, const Key& key, int device,
                          void* stream) {
  if (++records_ >= kMaxRecords) state_ = State::Closed;
  const PrivatePoolApi* api = private_pool_api();
  if (!api) return stop("no private memory pool API (trident._compat.private_pool_api)");
  PoolId pool{};
  if (!api->begin(device, stream, &pool)) return stop("PyTorch refused to route allocations to a private pool");
  torch::jit::Stack returns;
  std::string error, why;
  std::optional<LaunchRecord> rec = LaunchRecord::capture(
      [&](CUstream side) {
        cuda::CurrentStreamIs on_side(device, side);
        try {
          torch::jit::Stack stack = s.boxed_arguments(f, dyn);
          s.op.callBoxed(stack);
          returns = std::move(stack);
          return true;
        } catch (const std::exception& e) {
          error = first_line(e.what());
          return false;
        }
      },
      &why);
  api->end(device, pool);
  bool same = rec.has_value();
  CUresult r = CUDA_SUCCESS;
  if (same) r = rec->replay(static_cast<CUstream>(stream));  // must give this call's ATen returns
  same = same && r == CUDA_SUCCESS;
  for (size_t i = 0; same && i < valued_.size(); ++i) {
    const size_t k = valued_[i];
    same = k < returns.size() && k < s.result_slots.size() && returns[k].isTensor() &&
           same_bits(returns[k].toTensor(), f.slots[s.result_slots[k]]);
  }
  if (!same) {
    returns.clear();
    api->release(device, pool);
    if (!rec) return stop(error.empty() ? why : "the call failed under stream capture: " + error);
    return stop(r != CUDA_SUCCESS ? "the driver refused a recorded launch: " + LaunchRecord::error_text(r)
                                  : "a first replay differed from ATen's result");
  }
  drop_record();  // an earlier record of the site, its returns and its use of a pool
  record_ = std::make_unique<LaunchRecord>(std::move(*rec));
  recorded_ = key;
  kept_ = std::move(returns);
  pool_ = std::make_pair(device, pool);
}

void OpReplay::stop(const std::string& why) {
  state_ = State::Off;
  drop_record();
  refusal_tally().add(why);
}

void OpReplay::drop_record() {
  record_.reset();
  recorded_.reset();
  kept_.clear();
  if (pool_) {
    if (const PrivatePoolApi* api = private_pool_api()) api->release(pool_->first, pool_->second);
    pool_.reset();
  }
}

}  // namespace trident::runtime
