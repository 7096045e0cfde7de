// Integer expressions over call fields, for guards that are not a single comparison: the relations
// a symbolic-shape trace relied on ("L1.stride[0] == L1.size[1] * 8", "L0.size[0] % 16 == 0 and
// L0.size[0] >= 2"). Python semantics: // and % round toward -inf; comparisons, and, or, not give
// 0 or 1. Division or modulo by zero makes the expression 0 (a failing guard, never a crash).
// disjoint(p, n, q, m) is (p + n <= q) or (q + m <= p): byte ranges [p, p+n) and [q, q+m) do not
// overlap (aliasing.py's guards). It is its own operation so that the generated C evaluates it
// without a branch (emit_c.cpp's trd_disjoint): spelled out with `or` in thousands of guards (a
// backend graph with ninety tensor arguments, eighteen of them written) the conditions took GCC's
// jump threading 13 s at -O2.
// no_overlap(c, p, n, c, p, n, ...) takes triples (class, data pointer, bytes) and is 1 when no two
// byte ranges of conflicting classes overlap (a range of n <= 0 bytes overlaps nothing). Classes:
// 0 a written argument, 1 a read argument, 2 a read argument checked only against written state,
// 3 written module state, 4 read module state (state triples are literals: its addresses are fixed
// while the spec lives). Conflicts: 0-0, 0-1, 0-3, 0-4, 1-3, 2-3. One guard per device replaces
// pairwise `disjoint` guards, which grew as arguments x state (45,000 of them for a 36-layer KV
// cache, most of the generated C): the C sorts the arguments' ranges per call and binary-searches
// the state's, sorted when the module is generated.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/ir.h"

namespace trident::ir {

struct Expr {
  enum class Kind : uint8_t { Int, Field, Neg, Not, Add, Sub, Mul, FloorDiv, Mod, Eq, Ne, Lt, Le, Gt, Ge, And, Or, Max, Min, Disjoint, NoOverlap };
  Kind kind = Kind::Int;
  int64_t value = 0;        // Int
  Field field;              // Field
  std::vector<std::shared_ptr<const Expr>> args;
};

using ExprPtr = std::shared_ptr<const Expr>;

ExprPtr parse_expr(const std::string& text);  // throws ParseError
std::string print_expr(const Expr& e);
// Every field an expression reads (for the verifier).
void expr_fields(const Expr& e, std::vector<Field>& out);

// no_overlap's class codes and which pairs of them conflict (decision.cpp and explain.cpp agree).
enum OverlapClass : int64_t { kWrittenArg = 0, kReadArg = 1, kStateOnlyArg = 2, kWrittenState = 3, kReadState = 4 };
inline bool overlap_conflict(int64_t a, int64_t b) {
  if (a > b) { int64_t t = a; a = b; b = t; }
  return (a == kWrittenArg && b != kStateOnlyArg) || (b == kWrittenState && a != kWrittenState);
}

}  // namespace trident::ir
