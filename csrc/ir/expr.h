// Integer expressions over call fields, for guards that are not a single comparison: the relations
// a symbolic-shape trace relied on ("L1.stride[0] == L1.size[1] * 8", "L0.size[0] % 16 == 0 and
// L0.size[0] >= 2"). Python semantics: // and % round toward -inf; comparisons, and, or, not give
// 0 or 1. Division or modulo by zero makes the expression 0 (a failing guard, never a crash).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/ir.h"

namespace trident::ir {

struct Expr {
  enum class Kind : uint8_t { Int, Field, Neg, Not, Add, Sub, Mul, FloorDiv, Mod, Eq, Ne, Lt, Le, Gt, Ge, And, Or, Max, Min };
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
