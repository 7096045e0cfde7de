// Integer expressions over call fields, for guards that are not a single comparison: the relations
// a symbolic-shape trace relied on ("L1.stride[0] == L1.size[1] * 8", "L0.size[0] % 16 == 0 and
// L0.size[0] >= 2"). Python semantics: // and % round toward -inf; comparisons, and, or, not give
// 0 or 1. Division or modulo by zero makes the expression 0 (a failing guard, never a crash).
// disjoint(p, n, q, m) is (p + n <= q) or (q + m <= p): byte ranges [p, p+n) and [q, q+m) do not
// overlap (aliasing.py's guards). It is its own operation so that the generated C evaluates it
// without a branch (emit_c.cpp's trd_disjoint): spelled out with `or` in thousands of guards (a
// backend graph with ninety tensor arguments, eighteen of them written) the conditions took GCC's
// jump threading 13 s at -O2.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/ir.h"

namespace trident::ir {

struct Expr {
  enum class Kind : uint8_t { Int, Field, Neg, Not, Add, Sub, Mul, FloorDiv, Mod, Eq, Ne, Lt, Le, Gt, Ge, And, Or, Max, Min, Disjoint };
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

}  // namespace trident::ir
