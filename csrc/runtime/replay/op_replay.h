// An ATen call's kernel launches, recorded once and issued again while its inputs repeat, for the
// ATen calls whose host cost is many launches' worth: aten::_scaled_dot_product_cudnn_attention
// without dropout, ~35 µs of host time per call on an H200 host for its one or two kernels (cuDNN's
// graph lookup, variant pack and plan execution), 28% of the HF Llama step's host time
// (benchmarks/NOTES.md session 13). cuBLASLt's GEMMs replay the same way (lt_gemm.h); unlike a
// GEMM into a given output, these calls allocate their outputs and a workspace inside ATen, so the
// recording keeps them in a private memory pool (private_pool.h).
//
// Contract:
//   - Only where skipping the ATen call cannot be seen: no autograd recording (f.below_autograd), no
//     Python dispatch mode (f.keeps_buffers), the caller's stream not capturing, all tensor
//     arguments on the current CUDA device.
//   - Recording: a call whose key (each tensor argument's data pointer, dtype, sizes and strides;
//     the site's runtime integers; device and stream) equals the previous call's is run once more
//     under stream capture on a private stream (launch_record.h) with the torch current stream set
//     to it and the thread's allocations routed to a private pool, shared with the other recordings
//     for the caller's stream unless this one frees memory (its workspace), which no other
//     recording may then be given (python/trident/recording_pools.py). Its returns are kept by the
//     site; only recordings allocate from the pool. The record is
//     then issued on the caller's stream, and the returns that carry values (the attention's output;
//     its logsumexp when asked for) must equal this call's ATen returns bit for bit, or the site
//     stops replaying for good. A site records at most kMaxRecords times.
//   - Replay: the key equals the recorded one and nothing but the site holds the kept returns (no
//     value of an earlier call is alive): the recorded launches are issued on the caller's stream and
//     the kept returns are the call's results. Otherwise ATen runs.
//   - Returns without values (philox seed and offset without dropout; logsumexp when not asked for)
//     hold whatever the recording's allocation held, as eager's hold whatever the allocator gave.
//   - Open question for the GPU: the recorded kernels are cuDNN's; if PyTorch ever destroyed the
//     execution plan they belong to (a cache eviction), a replay would launch a function that is
//     gone. The driver's refusal stops the site; whether eviction happens is to be checked.
//   - A thread that finds the site busy (another thread recording it) runs ATen and records nothing.
//   - TRIDENT_ATEN_REPLAY=0 turns it off (read once; python/trident/config.py documents it) for the
//     modules loaded after. Why a site stopped is kept process-wide (refusals(), shown by
//     trident.explain).
#pragma once

#include <c10/util/SmallVector.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/aten/aten_site.h"
#include "runtime/memory/private_pool.h"

namespace trident::runtime {

class LaunchRecord;  // launch_record.h

class OpReplay final : public SiteHook {
 public:
  // The replay state of a site whose call may replay, or nullptr (the loader attaches it as the
  // site's hook).
  static std::shared_ptr<OpReplay> for_site(const AtenSite& site);
  ~OpReplay() override;

  // Issues the recorded launches and stores the kept returns in the frame when this call may
  // replay (contract); false: the caller runs ATen.
  bool before(const AtenSite& s, trd_frame& f, const int64_t* dyn) override;
  // After ATen ran the call (its returns in the frame): records when the key repeats.
  void after(const AtenSite& s, trd_frame& f, const int64_t* dyn) override;
  bool replaying() const;

  static constexpr int kMaxRecords = 4;

  // Each distinct reason a site of this process stopped replaying, with how many sites gave it.
  static std::vector<std::pair<std::string, int64_t>> refusals();
  // Whether modules loaded from now on get replay sites (TRIDENT_ATEN_REPLAY sets the start value;
  // benchmarks/ab_hf_step.py switches it for one compile). Returns the previous value.
  static bool set_enabled_for_new_modules(bool on);

 private:
  using Key = c10::SmallVector<int64_t, 48>;
  explicit OpReplay(std::vector<size_t> valued);
  // This call's key, or false when it may neither replay nor record (see the contract).
  bool key_of(const AtenSite& s, const trd_frame& f, const int64_t* dyn, Key& key, int* device,
              void** stream) const;
  bool kept_free() const;
  void try_record(const AtenSite& s, trd_frame& f, const int64_t* dyn, const Key& key, int device,
                  void* stream);
  void stop(const std::string& why);
  void drop_record();

  enum class State : uint8_t { Open, Closed, Off };  // may record / keeps its record / never replays
  // Runs of a module are serialized by the GIL, but a recording calls Python (the pool functions),
  // where another thread may run the same site: it takes ATen's path meanwhile (try_lock only).
  mutable std::mutex mu_;
  std::vector<size_t> valued_;  // indices of the returns that carry values (compared bit for bit)
  State state_ = State::Open;
  std::optional<Key> last_, recorded_;
  std::unique_ptr<LaunchRecord> record_;
  torch::jit::Stack kept_;  // the recorded call's returns
  std::optional<std::pair<int, PoolId>> pool_;  // (device, pool) holding kept_ and the workspace: one use
  int records_ = 0;
};

}  // namespace trident::runtime
