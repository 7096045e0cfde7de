// Host-side TMA descriptors (runtime/launch/tma_args.h): the cuTensorMapEncodeTiled arguments and the
// integers after the map, as Triton 3.6's launcher computes them.
#include <array>

#include "check.h"
#include "runtime/launch/tma_args.h"

namespace {

using trident::runtime::TmaEncodeArgs;
using trident::runtime::TmaMeta;

TmaMeta meta(int rank, std::array<uint32_t, 5> block, int elem_size, int elem_type, bool fp4 = false) {
  TmaMeta m;
  m.swizzle = 3;
  m.elem_size = elem_size;
  m.elem_type = elem_type;
  m.rank = rank;
  m.block = block;
  m.fp4_padded = fp4;
  return m;
}

}  // namespace

TEST(a_row_major_matrix_is_encoded_innermost_first_with_byte_strides) {
  const int64_t shape[] = {256, 512}, strides[] = {512, 1};
  TmaEncodeArgs a;
  CHECK(trident::runtime::tma_encode_args(meta(2, {64, 32}, 2, 6), shape, strides, false, a).empty());
  CHECK(a.rank == 2 && a.elem_type == 6 && a.swizzle == 3 && !a.nan_fill);
  CHECK(a.dims[0] == 512 && a.dims[1] == 256);
  CHECK(a.byte_strides[0] == 1024);
  CHECK(a.box[0] == 32 && a.box[1] == 64);
  CHECK(a.elem_strides[0] == 1 && a.elem_strides[1] == 1);
  CHECK(a.shape_args[0] == 256 && a.shape_args[1] == 512);  // the kernel's own order
  CHECK(a.stride_args[0] == 512 && a.stride_args[1] == 1);
}

TEST(three_dims_fp4_padding_nan_fill_and_the_driver_dtype_enum) {
  const int64_t shape[] = {4, 8, 16}, strides[] = {128, 16, 1};
  TmaEncodeArgs a;
  CHECK(trident::runtime::tma_encode_args(meta(3, {1, 8, 16}, 4, 8, true), shape, strides, true, a).empty());
  CHECK(a.elem_type == 10 && a.nan_fill);
  CHECK(a.dims[0] == 32 && a.dims[1] == 8 && a.dims[2] == 4);  // innermost doubled
  CHECK(a.byte_strides[0] == 64 && a.byte_strides[1] == 512);
  CHECK(a.box[0] == 16 && a.box[1] == 8 && a.box[2] == 1);
  CHECK(a.shape_args[2] == 32 && a.stride_args[0] == 128);
  CHECK(trident::runtime::tma_host_elem_type(9) == 8 && trident::runtime::tma_host_elem_type(10) == 9);
}

TEST(a_column_major_view_and_a_bad_rank_are_refused_with_a_reason) {
  const int64_t shape[] = {512, 256}, strides[] = {1, 512};
  TmaEncodeArgs a;
  CHECK(trident::runtime::tma_encode_args(meta(2, {64, 64}, 2, 6), shape, strides, false, a) ==
        "a tensor descriptor whose innermost stride is 512, not 1");
  CHECK(trident::runtime::tma_encode_args(meta(6, {}, 2, 6), shape, strides, false, a).find("rank 6") !=
        std::string::npos);
}
