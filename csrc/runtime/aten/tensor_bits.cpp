#include "runtime/aten/tensor_bits.h"

#include <ATen/ops/equal_ops.h>
#include <ATen/ops/view_ops.h>

namespace trident::runtime {

bool equal_bits(const at::Tensor& a, const at::Tensor& b) {
  if (!a.defined() || !b.defined() || a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  c10::ScalarType as_int;
  switch (a.element_size()) {
    case 1: as_int = c10::ScalarType::Byte; break;
    case 2: as_int = c10::ScalarType::Short; break;
    case 4: as_int = c10::ScalarType::Int; break;
    case 8: as_int = c10::ScalarType::Long; break;
    default: return false;
  }
  return at::_ops::equal::call(at::_ops::view_dtype::call(a, as_int), at::_ops::view_dtype::call(b, as_int));
}

}  // namespace trident::runtime
