#include "guards/explain.h"

#include <cmath>
#include <cstring>

#include "ir/expr.h"
#include "ir/text.h"
#include "ir/verifier.h"

namespace trident::guards {

// A field as an integer (ir/guard_fields.def); a float field reads 0 here (float guards compare
// the double itself), a field of an absent leaf INT64_MIN (it equals no literal).
int64_t read_field(const ir::Field& f, const trd_call& c) {
  using K = ir::Field::Kind;
  const trd_leaf* l = f.leaf >= 0 && f.leaf < c.nleaves ? &c.leaves[f.leaf] : nullptr;
#define TRD_READ_INT(x) return static_cast<int64_t>(x);
#define TRD_READ_UINT(x) return static_cast<int64_t>(x);
#define TRD_READ_FLOAT(x) return 0;
#define TRD_AT_CALL(member, type) TRD_READ_##type(c.member)
#define TRD_AT_LEAF(member, type) \
  if (!l) return INT64_MIN;       \
  TRD_READ_##type(l->member)
#define TRD_AT_DIM(member, type) \
  if (!l) return INT64_MIN;      \
  TRD_READ_##type(l->member[f.index])
#define TRD_GUARD_FIELD(kind, spelling, shape, member, type) \
  case K::kind: {                                             \
    TRD_AT_##shape(member, type)                              \
  }
  switch (f.kind) {
#include "ir/guard_fields.def"
  }
#undef TRD_GUARD_FIELD
#undef TRD_AT_CALL
#undef TRD_AT_LEAF
#undef TRD_AT_DIM
#undef TRD_READ_INT
#undef TRD_READ_UINT
#undef TRD_READ_FLOAT
  return 0;
}

namespace {

int64_t floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

int64_t eval(const ir::Expr& e, const trd_call& c);

// no_overlap's first conflicting pair, in words ("" when there is none): pairwise, as a reference
// for the sorted sweep the generated C does.
std::string first_overlap(const ir::Expr& e, const trd_call& c) {
  struct Range { int64_t cls, start, bytes; std::string name; };
  std::vector<Range> r;
  for (size_t k = 0; k + 2 < e.args.size(); k += 3) {
    const ir::Expr& p = *e.args[k + 1];
    std::string name = p.kind == ir::Expr::Kind::Field && p.field.leaf >= 0
                           ? "argument L" + std::to_string(p.field.leaf)
                           : "module state at " + std::to_string(eval(p, c));
    r.push_back({e.args[k]->value, eval(p, c), eval(*e.args[k + 2], c), name});
  }
  for (size_t i = 0; i < r.size(); ++i)
    for (size_t j = i + 1; j < r.size(); ++j) {
      const Range &a = r[i], &b = r[j];
      if (a.bytes > 0 && b.bytes > 0 && ir::overlap_conflict(a.cls, b.cls) && a.start < b.start + b.bytes &&
          b.start < a.start + a.bytes) {
        auto what = [](const Range& x) {
          return x.name + (x.cls == ir::kWrittenArg || x.cls == ir::kWrittenState ? " (written)" : "");
        };
        return what(a) + " overlaps " + what(b);
      }
    }
  return "";
}

int64_t eval(const ir::Expr& e, const trd_call& c) {
  using K = ir::Expr::Kind;
  if (e.kind == K::Int) return e.value;
  if (e.kind == K::NoOverlap) return first_overlap(e, c).empty();
  if (e.kind == K::Field) return read_field(e.field, c);
  int64_t a = eval(*e.args[0], c);
  if (e.kind == K::Neg) return -a;
  if (e.kind == K::Disjoint) {
    const int64_t n = eval(*e.args[1], c), q = eval(*e.args[2], c), m = eval(*e.args[3], c);
    return a + n <= q || q + m <= a;
  }
  if (e.kind == K::Not) return !a;
  int64_t b = eval(*e.args[1], c);
  switch (e.kind) {
    case K::Add: return a + b;
    case K::Sub: return a - b;
    case K::Mul: return a * b;
    case K::FloorDiv: return b == 0 ? 0 : b == -1 ? static_cast<int64_t>(0 - static_cast<uint64_t>(a)) : floordiv(a, b);
    case K::Mod: return b == 0 || b == -1 ? 0 : a - floordiv(a, b) * b;
    case K::Eq: return a == b;
    case K::Ne: return a != b;
    case K::Lt: return a < b;
    case K::Le: return a <= b;
    case K::Gt: return a > b;
    case K::Ge: return a >= b;
    case K::And: return a && b;
    case K::Or: return a || b;
    case K::Max: return a > b ? a : b;
    case K::Min: return a < b ? a : b;
    default: return 0;
  }
}

// The relational guard ops on ints or doubles (divisibility is the caller's: ints only).
template <typename T>
bool compare(ir::Guard::Op op, T a, T b) {
  using Op = ir::Guard::Op;
  switch (op) {
    case Op::Eq: return a == b;
    case Op::Ne: return a != b;
    case Op::Ge: return a >= b;
    case Op::Le: return a <= b;
    case Op::Gt: return a > b;
    case Op::Lt: return a < b;
    default: return false;
  }
}

}  // namespace

bool check_guard(const ir::Guard& g, const trd_call& c) {
  using Op = ir::Guard::Op;
  if (g.expr) return eval(*g.expr, c) != 0;
  bool float_lhs = g.lhs.kind == ir::Field::Kind::FloatValue;
  bool float_rhs = g.rhs_is_field && g.rhs_field.kind == ir::Field::Kind::FloatValue;
  if (float_lhs || float_rhs) {  // compared as doubles, exactly as the generated C does
    auto value = [&](const ir::Field& f) {
      if (f.kind == ir::Field::Kind::FloatValue)
        return f.leaf < c.nleaves ? c.leaves[f.leaf].fval : 0.0;
      return static_cast<double>(read_field(f, c));
    };
    if (float_lhs && g.lhs.leaf >= c.nleaves) return false;
    double v = value(g.lhs);
    double w = g.rhs_is_field ? value(g.rhs_field) : float_lhs ? g.rhs_float : static_cast<double>(g.rhs_int);
    if (float_lhs && !g.rhs_is_field && !std::isnan(w) && (g.op == Op::Eq || g.op == Op::Ne))
      return (ir::float_bits(v) == ir::float_bits(w)) == (g.op == Op::Eq);  // by bits, as decision.cpp
    return compare(g.op, v, w);  // a divisibility guard never has a double operand
  }
  int64_t a = read_field(g.lhs, c);
  int64_t b = g.rhs_is_field ? read_field(g.rhs_field, c) : g.rhs_int;
  if (g.op == Op::DivisibleBy) return b != 0 && (b == -1 || a % b == 0);
  if (g.op == Op::NotDivisibleBy) return b != 0 && b != -1 && a % b != 0;
  return compare(g.op, a, b);
}

bool accepts(const ir::Spec& spec, const trd_call& c) {
  if (static_cast<size_t>(c.structure_len) != spec.structure.size() ||
      std::memcmp(c.structure, spec.structure.data(), spec.structure.size()) != 0 ||
      c.nleaves != ir::count_structure_leaves(spec.structure))
    return false;
  for (const auto& g : spec.guards)
    if (!check_guard(g, c)) return false;
  return true;
}

std::string first_failure(const ir::Spec& spec, const trd_call& c) {
  if (static_cast<size_t>(c.structure_len) != spec.structure.size() ||
      std::memcmp(c.structure, spec.structure.data(), spec.structure.size()) != 0)
    return "structure: call has \"" + std::string(c.structure, c.structure_len) + "\", spec expects \"" +
           spec.structure + "\"";
  for (const auto& g : spec.guards) {
    if (check_guard(g, c)) continue;
    if (g.expr && g.expr->kind == ir::Expr::Kind::NoOverlap) return "no_overlap: " + first_overlap(*g.expr, c);
    if (g.expr) return ir::print_guard(g).substr(6) + " (false)";
    std::string actual = g.lhs.kind == ir::Field::Kind::FloatValue && g.lhs.leaf < c.nleaves
                             ? std::to_string(c.leaves[g.lhs.leaf].fval)
                             : std::to_string(read_field(g.lhs, c));
    return ir::print_guard(g).substr(6) + " (actual " + actual + ")";
  }
  return "";
}

}  // namespace trident::guards
