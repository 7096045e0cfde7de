// The rules graph rebinding uses to tell a CUDA graph's words apart (runtime/graphs/rebind_words.h):
// a site follows exactly one argument's shift; encoded addresses stop the plan; pool memory and
// bytes that follow no shift are left alone.
#include <vector>

#include "check.h"
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
