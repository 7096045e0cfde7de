// How one 8-byte word of a captured graph relates to the arguments' addresses, from its values in
// three captures of one program: a (the arguments where the caller has them), b (argument i moved
// by its shift s_i) and c (moved by 2 s_i). The rules graph_rebind.h states, kept free of CUDA so
// that they are tested on any machine (tests/python/test_graph_rebind_cpu.py).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace trident::runtime {

// One rebindable argument in a capture: its address, the bytes from it its elements span (the last
// element's end), and its shift in capture b (twice that in capture c).
struct RebindArg {
  uint64_t ptr = 0, extent = 0, shift = 0;
};
using AddressRanges = std::vector<std::pair<uint64_t, uint64_t>>;  // [begin, end), any order

enum class Word {
  kSite,     // argument i's address plus an offset: rewritten on a rebind
  kUnmoved,  // equal in all captures and in no argument: independent of the addresses
  kPool,     // the captures' own memory (their private pool)
  kEncoded,  // moved as the shifts do but is not an address: no plan
  kNoShift,  // moved in no relation to the shifts: bytes a launch leaves uninitialized
  kStuck,    // equal in all captures but inside an argument: an address that did not follow it
};

inline bool in_ranges(const AddressRanges& rs, uint64_t v) {
  for (const auto& [b, e] : rs)
    if (v >= b && v < e) return true;
  return false;
}

struct WordClassifier {
  const std::vector<RebindArg>& args;  // args[0].shift is the unit the others are multiples of
  const AddressRanges& pool;

  // The argument whose memory holds v (strictly inside its extent), or -1.
  int inside(uint64_t v) const {
    for (size_t i = 0; i < args.size(); ++i)
      if (v >= args[i].ptr && v - args[i].ptr < args[i].extent) return static_cast<int>(i);
    return -1;
  }

  // The word's kind; for a site, the argument in *arg and the offset from its address in *delta.
  Word classify(uint64_t va, uint64_t vb, uint64_t vc, int* arg, uint64_t* delta) const {
    if (va == vb && va == vc) return inside(va) >= 0 ? Word::kStuck : Word::kUnmoved;
    for (size_t i = 0; i < args.size(); ++i) {  // the end included: a one-past pointer
      const RebindArg& r = args[i];
      if (va >= r.ptr && va - r.ptr <= r.extent && vb - va == r.shift && vc - va == 2 * r.shift) {
        *arg = static_cast<int>(i);
        *delta = va - r.ptr;
        return Word::kSite;
      }
    }
    if (in_ranges(pool, va) && in_ranges(pool, vb) && in_ranges(pool, vc)) return Word::kPool;
    if (vb != va && vc - va == 2 * (vb - va) && follows_shifts(vb - va)) return Word::kEncoded;
    return Word::kNoShift;
  }

  // Whether a move by d is what the shifts make of an encoded address: a small multiple of the unit
  // shift scaled by a power of two up to 2^16 either way (an address shifted into a field, a
  // difference of two arguments' addresses), or of its low 32 bits (an address truncated to 32).
  // A host counter that advanced between the captures moves by amounts that are not.
  bool follows_shifts(uint64_t d) const {
    const uint64_t limit = 2 * static_cast<uint64_t>(args.size()) + 2;
    auto small_multiple = [&](uint64_t base) {
      if (base == 0) return false;
      const uint64_t m = d % base == 0 ? d / base : (0 - d) % base == 0 ? (0 - d) / base : 0;
      return m >= 1 && m <= limit;
    };
    const uint64_t unit = args.empty() ? 0 : args[0].shift;
    for (int k = 0; k <= 16; ++k)
      if (small_multiple(unit >> k) || small_multiple(unit << k)) return true;
    return small_multiple(unit & 0xffffffffull) || small_multiple((unit & 0xffffffffull) << 32);
  }
};

// What a replay does with a copied argument (spec_graphs.h: Copied arguments), from the number of
// nodes holding its buffer's address (SIZE_MAX: unknown, the graph has no rebind plan), the
// caller's address and the buffer's: nothing when no node reads it; point those nodes at the
// caller's tensor when they are at most `max_nodes` and the caller's address is aligned as the
// buffer's up to 2^align_bits (what the capture's kernels may have assumed); else copy it in.
enum class CopiedArgument { kNothing, kPointAt, kCopyIn };

inline CopiedArgument copied_argument(size_t nodes, uint64_t theirs, uint64_t mine, size_t max_nodes, int align_bits) {
  if (nodes == 0) return CopiedArgument::kNothing;
  auto alignment = [&](uint64_t p) { return p == 0 ? align_bits : std::min(__builtin_ctzll(p), align_bits); };
  if (nodes <= max_nodes && theirs != 0 && alignment(theirs) >= alignment(mine)) return CopiedArgument::kPointAt;
  return CopiedArgument::kCopyIn;
}

}  // namespace trident::runtime
