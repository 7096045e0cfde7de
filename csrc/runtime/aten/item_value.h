// A one-element tensor's number as generated code takes it (the `item` instruction): an int64_t (a
// bool as 0 or 1), or, where the program takes a float, a double's bits. Tensor.item(): on the current
// stream, waiting for the device; throws what it throws.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <cstring>

namespace trident::runtime {

inline int64_t item_value(const at::Tensor& t, bool as_float) {
  const c10::Scalar v = t.item();
  if (!as_float) return v.isBoolean() ? static_cast<int64_t>(v.toBool()) : v.toLong();
  const double d = v.toDouble();
  int64_t bits;
  std::memcpy(&bits, &d, sizeof bits);
  return bits;
}

}  // namespace trident::runtime
