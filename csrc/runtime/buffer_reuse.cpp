#include "runtime/buffer_reuse.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace trident::runtime {

std::optional<c10::Stream> current_stream(c10::Device device) {
  if (device.is_cpu()) return std::nullopt;
  return c10::impl::getDeviceGuardImpl(device.type())->getStream(device);
}

at::Tensor* ReusableBuffer::lookup(const Key& key) {
  if (!t_.defined() || key != key_) return nullptr;
  if (t_.use_count() != 1 || t_.storage().use_count() != 1) return nullptr;
  if (current_stream(t_.device()) != stream_) return nullptr;
  return &t_;
}

void ReusableBuffer::keep(const at::Tensor& t, Key key, ReuseBudget& budget) {
  if (escaped_) return;
  drop(budget);
  const int64_t bytes = static_cast<int64_t>(t.storage().nbytes());
  if (!budget.reserve(bytes)) return;
  t_ = t;
  key_ = std::move(key);
  stream_ = current_stream(t.device());
  bytes_ = bytes;
}

void ReusableBuffer::check_escape(ReuseBudget& budget) {
  if (!t_.defined() || (t_.use_count() == 1 && t_.storage().use_count() == 1)) return;
  escaped_ = true;
  drop(budget);
}

void ReusableBuffer::drop(ReuseBudget& budget) {
  if (!t_.defined()) return;
  budget.give_back(bytes_);
  t_.reset();
  bytes_ = 0;
}

}  // namespace trident::runtime
