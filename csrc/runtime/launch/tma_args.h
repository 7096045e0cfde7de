// Host-side TMA descriptors (a kernel parameter `tensordesc<dtype[block]>` that the kernel lowered to
// TMA): the arguments of cuTensorMapEncodeTiled and the integers that follow the map in the kernel's
// parameter list, computed exactly as Triton 3.6's launcher computes them (nvidia driver.py
// make_tensordesc_arg, driver.c fillTMADescriptor), so a native launch builds the map Triton's
// would. Pure arithmetic over plain integers (no CUDA, no torch): tests/cpp checks it.
//
// Contract, from Triton:
//   - dims and box are given innermost first (the tensor's shape and the block shape reversed);
//   - the rank-1 global strides are in bytes, innermost-but-one first; the innermost stride must be
//     1 element (else the map is refused);
//   - a descriptor with fp4 padding doubles its innermost dim;
//   - the element type is Triton's device enum remapped to the driver's (8->10, 9->8, 10->9);
//   - element strides are all 1, no interleave, L2 promotion 128B, the kernel's swizzle, and OOB fill
//     NaN-request-zero-FMA for padding "nan", else none;
//   - after the map (by value, 128 bytes, 128-byte aligned) the kernel takes the shape as ndim i32
//     (fp4-padded as above) and the strides as ndim i64, in the tensor's order.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace trident::runtime {

constexpr int kTmaMaxRank = 5;

// What the compiled kernel's metadata says of one descriptor parameter (tensordesc_meta[i]).
struct TmaMeta {
  int swizzle = 0;       // CUtensorMapSwizzle
  int elem_size = 0;     // bytes
  int elem_type = 0;     // Triton's device-side enum (remapped for the driver below)
  int rank = 0;
  std::array<uint32_t, kTmaMaxRank> block{};  // block shape, in the tensor's order
  bool fp4_padded = false;
};

struct TmaEncodeArgs {
  int elem_type = 0;  // CUtensorMapDataType
  uint32_t rank = 0;
  std::array<uint64_t, kTmaMaxRank> dims{};           // innermost first
  std::array<uint64_t, kTmaMaxRank> byte_strides{};   // rank - 1 used, innermost-but-one first
  std::array<uint32_t, kTmaMaxRank> box{};            // innermost first
  std::array<uint32_t, kTmaMaxRank> elem_strides{};   // all 1
  int swizzle = 0;
  bool nan_fill = false;  // CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA, else _NONE
  std::array<int32_t, kTmaMaxRank> shape_args{};      // the i32 parameters after the map
  std::array<int64_t, kTmaMaxRank> stride_args{};     // the i64 parameters after those
};

// Triton's TMA_DTYPE_DEVICE_TO_HOST.
inline int tma_host_elem_type(int device) {
  switch (device) {
    case 8: return 10;
    case 9: return 8;
    case 10: return 9;
    default: return device;
  }
}

// The encode arguments for a descriptor over a tensor of `shape`/`strides` (elements, the tensor's
// order, rank meta.rank). Returns an empty string, or why the map cannot be built.
inline std::string tma_encode_args(const TmaMeta& meta, const int64_t* shape, const int64_t* strides,
                                   bool nan_padding, TmaEncodeArgs& out) {
  const int r = meta.rank;
  if (r < 1 || r > kTmaMaxRank) return "a tensor descriptor of rank " + std::to_string(r) + " (TMA takes 1 to 5)";
  if (strides[r - 1] != 1)
    return "a tensor descriptor whose innermost stride is " + std::to_string(strides[r - 1]) + ", not 1";
  out = TmaEncodeArgs{};
  out.elem_type = tma_host_elem_type(meta.elem_type);
  out.rank = static_cast<uint32_t>(r);
  out.swizzle = meta.swizzle;
  out.nan_fill = nan_padding;
  for (int i = 0; i < r; ++i) {
    int64_t dim = shape[i];
    if (i == r - 1 && meta.fp4_padded) dim *= 2;
    if (dim < 0) return "a tensor descriptor with a negative size";
    out.shape_args[i] = static_cast<int32_t>(dim);
    out.stride_args[i] = strides[i];
    out.dims[r - 1 - i] = static_cast<uint64_t>(dim);
    out.box[r - 1 - i] = meta.block[i];
    out.elem_strides[i] = 1;
  }
  for (int i = 0; i + 1 < r; ++i)
    out.byte_strides[r - 2 - i] = static_cast<uint64_t>(meta.elem_size) * static_cast<uint64_t>(strides[i]);
  return {};
}

}  // namespace trident::runtime
