// Allocation sites that hand the same buffer out again on the next call.
//
// Most tensors a decode step allocates are intermediates: torch.empty before a Triton kernel whose
// output only the next op reads. An allocation site keeps the tensor it allocated and, on the next
// call, returns it again instead of going through the caching allocator, when all of these hold:
//   - the request is the same (sizes, or the template tensor's sizes and strides; the dtype, layout
//     and device are the site's constants);
//   - nothing but the site holds the tensor or its storage (TensorImpl and StorageImpl use counts
//     are 1), so no output, view or earlier frame can observe the rewrite;
//   - the buffer has never escaped a call: after every run the module drops, for good, the buffer of
//     any site whose tensor is still held once the frame is gone (it was returned, or a returned
//     view aliases it), so outputs are never recycled;
//   - the current stream is the one of the previous use, so stream order makes the reuse safe
//     exactly as the caching allocator's reuse of a freed block on the same stream is;
//   - the buffer is at most kMaxBytes, and the module's reused buffers stay under kModuleBudget.
// Runs of one module are serialized by the GIL (the hot path never releases it); a reentrant run
// sees the outer run's reference (use count 2) and allocates normally.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Stream.h>
#include <c10/util/SmallVector.h>

#include <cstdint>

namespace trident::runtime {

class ReuseBudget {
 public:
  static constexpr int64_t kMaxBytes = int64_t{16} << 20;
  static constexpr int64_t kModuleBudget = int64_t{256} << 20;
  bool reserve(int64_t bytes) {
    if (bytes > kMaxBytes || used_ + bytes > kModuleBudget) return false;
    used_ += bytes;
    return true;
  }
  void give_back(int64_t bytes) { used_ -= bytes; }
  int64_t used() const { return used_; }

 private:
  int64_t used_ = 0;
};

class ReusableBuffer {
 public:
  using Key = c10::SmallVector<int64_t, 16>;

  // The kept tensor if it may serve a request with this key now; nullptr otherwise.
  at::Tensor* lookup(const Key& key);
  // Keep a fresh allocation for the next call, when the budget allows and the site never escaped.
  void keep(const at::Tensor& t, Key key, ReuseBudget& budget);
  // After a run: drop the buffer for good if anything outside the site still holds it.
  void check_escape(ReuseBudget& budget);

  bool escaped() const { return escaped_; }
  bool holding() const { return t_.defined(); }

 private:
  void drop(ReuseBudget& budget);
  at::Tensor t_;
  Key key_;
  std::optional<c10::Stream> stream_;
  int64_t bytes_ = 0;
  bool escaped_ = false;
};

// The stream ATen work on `device` is queued on now; nullopt for devices without streams (CPU).
std::optional<c10::Stream> current_stream(c10::Device device);

}  // namespace trident::runtime
