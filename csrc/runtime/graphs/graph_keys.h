// The key a graph serves (spec_graphs.h: Key), laid out leaf by leaf, and what differs between two
// keys in words: why a call captured a graph of its own (explain). Free of CUDA and torch, so that
// tests/cpp checks the layout and the words on any machine.
//
// Layout, per argument leaf: its kind, then
//   - tensor: dtype, dim, sizes[dim], strides[dim], storage offset, then the data pointer's
//     alignment in bits (up to SpecGraphs::kAlignBits; -2 for a null pointer), or -1 for an
//     argument copied into the graph's buffer (its address is not part of the key);
//   - float: its bits; int and bool: the value; none: nothing (a scalar's value only where the
//     spec's graphs are keyed by their scalars: `values`);
// then the device, the caller's stream and the module state set's identity.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "abi/trident_abi.h"

namespace trident::runtime {

constexpr int64_t kKeyCopied = -1, kKeyNull = -2;

// "[1, 16]": n integers as the words of keys and patches say them.
inline std::string int_list(const int64_t* v, size_t n) {
  std::string s = "[";
  for (size_t i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// Appends leaf `l`'s part of a key. `copied`: a tensor read from the graph's own buffer.
template <class Key>
void append_leaf_key(Key& key, const trd_leaf& l, bool copied, int align_bits, bool values) {
  key.push_back(l.kind);
  if (!values && (l.kind == TRD_FLOAT || l.kind == TRD_INT || l.kind == TRD_BOOL)) return;
  switch (l.kind) {
    case TRD_TENSOR:
      key.push_back(l.dtype);
      key.push_back(l.dim);
      key.insert(key.end(), l.sizes, l.sizes + l.dim);
      key.insert(key.end(), l.strides, l.strides + l.dim);
      key.push_back(l.storage_offset);
      key.push_back(copied ? kKeyCopied : l.data_ptr ? std::min(__builtin_ctzll(l.data_ptr), align_bits) : kKeyNull);
      break;
    case TRD_FLOAT: {
      int64_t bits;
      std::memcpy(&bits, &l.fval, sizeof bits);
      key.push_back(bits);
      break;
    }
    case TRD_INT:
    case TRD_BOOL: key.push_back(l.ival); break;
    default: break;
  }
}

// In words, the first difference between keys `a` and `b` of `nleaves` argument leaves each: "leaf 2
// (int): 17 -> 18", "leaf 0 (tensor): sizes [1, 16] -> [8, 16]", "the caller's stream", ...; "" when
// they are equal. `values`: the keys hold their scalars' values (append_leaf_key).
inline std::string key_change(int32_t nleaves, const int64_t* a, size_t na, const int64_t* b, size_t nb, bool values) {
  size_t at = 0;
  for (int32_t k = 0; k < nleaves; ++k) {
    const std::string leaf = "leaf " + std::to_string(k);
    if (at >= na || at >= nb) return "the arguments' structure";
    if (a[at] != b[at]) return leaf + ": its kind";
    const int64_t kind = a[at++];
    if (kind == TRD_TENSOR) {
      if (at + 2 > na || at + 2 > nb) return "the arguments' structure";
      if (a[at] != b[at]) return leaf + " (tensor): its dtype";
      if (a[at + 1] != b[at + 1]) return leaf + " (tensor): its number of dimensions";
      const int64_t dim = a[at + 1];
      at += 2;
      if (at + 2 * dim + 2 > na || at + 2 * dim + 2 > nb) return "the arguments' structure";
      if (!std::equal(a + at, a + at + dim, b + at))
        return leaf + " (tensor): sizes " + int_list(a + at, static_cast<size_t>(dim)) + " -> " + int_list(b + at, static_cast<size_t>(dim));
      at += dim;
      if (!std::equal(a + at, a + at + dim, b + at))
        return leaf + " (tensor): strides " + int_list(a + at, static_cast<size_t>(dim)) + " -> " + int_list(b + at, static_cast<size_t>(dim));
      at += dim;
      if (a[at] != b[at])
        return leaf + " (tensor): storage offset " + std::to_string(a[at]) + " -> " + std::to_string(b[at]);
      ++at;
      if (a[at] != b[at]) {
        auto align = [](int64_t v) {
          return v == kKeyCopied ? std::string("copied") : v == kKeyNull ? std::string("null")
                                                                         : "2^" + std::to_string(v);
        };
        return leaf + " (tensor): address alignment " + align(a[at]) + " -> " + align(b[at]);
      }
      ++at;
    } else if (values && (kind == TRD_FLOAT || kind == TRD_INT || kind == TRD_BOOL)) {
      if (at >= na || at >= nb) return "the arguments' structure";
      if (a[at] != b[at]) {
        if (kind != TRD_FLOAT)
          return leaf + (kind == TRD_INT ? " (int): " : " (bool): ") + std::to_string(a[at]) + " -> " +
                 std::to_string(b[at]);
        double x, y;
        std::memcpy(&x, a + at, sizeof x);
        std::memcpy(&y, b + at, sizeof y);
        return leaf + " (float): " + std::to_string(x) + " -> " + std::to_string(y);
      }
      ++at;
    }
  }
  static const char* const tail[] = {"the device", "the caller's stream", "the module state (a new set)"};
  for (const char* what : tail) {
    if (at >= na || at >= nb) return na == nb ? "" : "the arguments' structure";
    if (a[at] != b[at]) return what;
    ++at;
  }
  return na == nb ? "" : "the arguments' structure";
}

}  // namespace trident::runtime
