// The rules graph rebinding uses to tell a CUDA graph's words apart (runtime/graphs/rebind_words.h):
// a site follows exactly one argument's shift; encoded addresses stop the plan; pool memory and
// bytes that follow no shift are left alone. Also what a replay does with a copied argument, and a
// graph's key (runtime/graphs/graph_keys.h).
#include <vector>

#include "check.h"
#include "runtime/graphs/graph_keys.h"
#include "runtime/graphs/rebind_words.h"

namespace {

using trident::runtime::AddressRanges;
using trident::runtime::RebindArg;
using trident::runtime::Word;
using trident::runtime::WordClassifier;

constexpr uint64_t S = 0x100010000ull;
constexpr uint64_t A = 0x7f0000000000ull, A_LEN = 0x20000, B = A + A_LEN, B_LEN = 0x1000;
const std::vector<RebindArg> kArgs = {{A, A_LEN, S}, {B, B_LEN, 2 * S}};
const AddressRanges kPool = {{0x7e0000000000ull, 0x7e0000100000ull}};

Word kind(uint64_t va, uint64_t vb, uint64_t vc, int* arg = nullptr, uint64_t* delta = nullptr) {
  int a = -1;
  uint64_t d = 0;
  const Word w = WordClassifier{kArgs, kPool}.classify(va, vb, vc, &a, &d);
  if (arg) *arg = a;
  if (delta) *delta = d;
  return w;
}

}  // namespace

TEST(a_site_is_the_argument_whose_shift_the_word_followed) {
  int arg = -1;
  uint64_t delta = 0;
  CHECK(kind(B, B + 2 * S, B + 4 * S, &arg, &delta) == Word::kSite);  // B's first byte is A's end
  CHECK(arg == 1 && delta == 0);
  CHECK(kind(A + A_LEN, A + A_LEN + S, A + A_LEN + 2 * S, &arg, &delta) == Word::kSite);  // one past A
  CHECK(arg == 0 && delta == A_LEN);
}

TEST(encoded_addresses_stop_the_plan) {
  const uint64_t x = A + 0x40;
  CHECK(kind(x >> 4, (x + S) >> 4, (x + 2 * S) >> 4) == Word::kEncoded);
  CHECK(kind(B - A, B + 2 * S - (A + S), B + 4 * S - (A + 2 * S)) == Word::kEncoded);
  CHECK(kind(A + 0x40, A + 0x40, A + 0x40) == Word::kStuck);
}

TEST(pool_memory_constants_and_unrelated_bytes_are_left_alone) {
  CHECK(kind(kPool[0].first + 8, kPool[0].first + 0x800, kPool[0].first + 0x1000) == Word::kPool);
  CHECK(kind(64, 64, 64) == Word::kUnmoved);
  CHECK(kind(0x7ffc00000927ull, 0x7ffc000009a9ull, 0x7ffc00000a2bull) == Word::kNoShift);
}

// A copied argument of a replay (spec_graphs.h): the buffer at a 512-aligned address, at most four
// nodes pointed elsewhere, alignment compared up to 2^9.
TEST(a_copied_argument_is_read_in_place_only_where_few_nodes_hold_it_and_it_is_as_aligned) {
  using trident::runtime::copied_argument;
  using trident::runtime::CopiedArgument;
  const uint64_t buffer = 0x7e0000000200ull, fresh = 0x7f0000400000ull;
  CHECK(copied_argument(0, fresh, buffer, 4, 9) == CopiedArgument::kNothing);           // nothing reads it
  CHECK(copied_argument(1, fresh, buffer, 4, 9) == CopiedArgument::kPointAt);
  CHECK(copied_argument(4, fresh, buffer, 4, 9) == CopiedArgument::kPointAt);
  CHECK(copied_argument(5, fresh, buffer, 4, 9) == CopiedArgument::kCopyIn);            // too many nodes
  CHECK(copied_argument(SIZE_MAX, fresh, buffer, 4, 9) == CopiedArgument::kCopyIn);     // no rebind plan
  CHECK(copied_argument(1, fresh + 16, buffer, 4, 9) == CopiedArgument::kCopyIn);       // 16-byte aligned only
  CHECK(copied_argument(1, fresh + 0x1000, buffer, 4, 9) == CopiedArgument::kPointAt);  // more aligned than needed
  CHECK(copied_argument(1, 0, buffer, 4, 9) == CopiedArgument::kCopyIn);                // an empty tensor's null
  CHECK(copied_argument(1, fresh + 16, buffer + 16, 4, 9) == CopiedArgument::kPointAt); // as aligned as the buffer
}

// A graph's key (runtime/graphs/graph_keys.h): the layout per leaf, and the first difference in words.
namespace {

struct KeyVec : std::vector<int64_t> {};

KeyVec key_of(const std::vector<trd_leaf>& leaves, const std::vector<bool>& copied, int64_t stream,
              bool values = true) {
  KeyVec k;
  for (size_t i = 0; i < leaves.size(); ++i) trident::runtime::append_leaf_key(k, leaves[i], copied[i], 9, values);
  k.push_back(0);       // device
  k.push_back(stream);  // stream
  k.push_back(7);       // state set
  return k;
}

trd_leaf tensor_leaf(std::vector<int64_t> sizes, uint64_t ptr) {
  trd_leaf l{};
  l.kind = TRD_TENSOR;
  l.dtype = 6;
  l.dim = static_cast<int32_t>(sizes.size());
  int64_t stride = 1;
  for (int d = l.dim - 1; d >= 0; --d) l.sizes[d] = sizes[d], l.strides[d] = stride, stride *= sizes[d];
  l.data_ptr = ptr;
  return l;
}

trd_leaf int_leaf(int64_t v) {
  trd_leaf l{};
  l.kind = TRD_INT;
  l.ival = v;
  return l;
}

std::string change(const KeyVec& a, const KeyVec& b, int32_t n, bool values = true) {
  return trident::runtime::key_change(n, a.data(), a.size(), b.data(), b.size(), values);
}

}  // namespace

TEST(a_graph_key_is_laid_out_per_leaf_and_its_first_difference_is_said_in_words) {
  const std::vector<bool> bound = {false, false};
  const KeyVec base = key_of({tensor_leaf({1, 16}, 0x7f0000000200ull), int_leaf(17)}, bound, 1);
  const std::vector<int64_t> tensor_part = {TRD_TENSOR, 6, 2, 1, 16, 16, 1, 0, 9};
  CHECK(std::equal(tensor_part.begin(), tensor_part.end(), base.begin()));
  CHECK(base.size() == tensor_part.size() + 2 + 3);
  CHECK(change(base, base, 2).empty());
  CHECK(change(base, key_of({tensor_leaf({1, 16}, 0x7f0000000200ull), int_leaf(18)}, bound, 1), 2) ==
        "leaf 1 (int): 17 -> 18");
  CHECK(change(base, key_of({tensor_leaf({8, 16}, 0x7f0000000200ull), int_leaf(17)}, bound, 1), 2) ==
        "leaf 0 (tensor): sizes [1, 16] -> [8, 16]");
  CHECK(change(base, key_of({tensor_leaf({1, 16}, 0x7f0000000210ull), int_leaf(17)}, bound, 1), 2) ==
        "leaf 0 (tensor): address alignment 2^9 -> 2^4");
  CHECK(change(base, key_of({tensor_leaf({1, 16}, 0x7f0000000200ull), int_leaf(17)}, bound, 2), 2) ==
        "the caller's stream");
  // a copied tensor: its address is not in the key
  const std::vector<bool> copy = {true, false};
  CHECK(change(key_of({tensor_leaf({1, 16}, 0x200), int_leaf(17)}, copy, 1),
               key_of({tensor_leaf({1, 16}, 0x7f0000000210ull), int_leaf(17)}, copy, 1), 2).empty());
}

TEST(a_graph_key_without_scalar_values_serves_every_int_and_still_says_other_differences) {
  // graphs patched for new scalars (runtime/graphs/scalar_patch.h): an int is its kind alone
  const std::vector<bool> bound = {false, false};
  const KeyVec at17 = key_of({tensor_leaf({1, 16}, 0x7f0000000200ull), int_leaf(17)}, bound, 1, false);
  const KeyVec at18 = key_of({tensor_leaf({1, 16}, 0x7f0000000200ull), int_leaf(18)}, bound, 1, false);
  CHECK(at17 == at18);
  CHECK(at17.size() == 9 + 1 + 3);
  CHECK(change(at17, at18, 2, false).empty());
  CHECK(change(at17, key_of({tensor_leaf({8, 16}, 0x7f0000000200ull), int_leaf(18)}, bound, 1, false), 2, false) ==
        "leaf 0 (tensor): sizes [1, 16] -> [8, 16]");
  CHECK(change(at17, key_of({tensor_leaf({1, 16}, 0x7f0000000200ull), int_leaf(17)}, bound, 2, false), 2, false) ==
        "the caller's stream");
}
