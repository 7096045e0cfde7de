#include "guards/decision.h"
#include "common/errors.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <stdexcept>

#include "ir/expr.h"
#include "ir/text.h"
#include "ir/verifier.h"

namespace trident::guards {
namespace {

using ir::Field;
using ir::Guard;

std::string int_literal(int64_t v) {
  if (v == INT64_MIN) return "(-INT64_C(9223372036854775807) - 1)";
  return "INT64_C(" + std::to_string(v) + ")";
}

std::string float_literal(double v) {
  if (std::isinf(v)) return v > 0 ? "__builtin_inf()" : "(-__builtin_inf())";
  return ir::print_float(v);
}

// The C that reads a field in the decision program (ir/guard_fields.def): unsigned words compared
// as int64, the way the IR's literals hold them.
std::string field_expr(const Field& f) {
  using K = Field::Kind;
  const std::string leaf = "c->leaves[" + std::to_string(f.leaf) + "].";
#define TRD_C_INT(x) x
#define TRD_C_UINT(x) "(int64_t)" + x
#define TRD_C_FLOAT(x) x
#define TRD_AT_CALL(member, type) return TRD_C_##type(std::string("c->" #member));
#define TRD_AT_LEAF(member, type) return TRD_C_##type(leaf + #member);
#define TRD_AT_DIM(member, type) return TRD_C_##type(leaf + #member "[" + std::to_string(f.index) + "]");
#define TRD_GUARD_FIELD(kind, spelling, shape, member, type) \
  case K::kind:                                               \
    TRD_AT_##shape(member, type)
  switch (f.kind) {
#include "ir/guard_fields.def"
  }
#undef TRD_GUARD_FIELD
#undef TRD_AT_CALL
#undef TRD_AT_LEAF
#undef TRD_AT_DIM
#undef TRD_C_INT
#undef TRD_C_UINT
#undef TRD_C_FLOAT
  return "0";
}

// Guards are compared by their printed form: two specs share a check exactly when it reads the same.
std::string key(const Guard& g) { return ir::print_guard(g); }

bool switchable(const Guard& g) {
  return !g.expr && g.op == Guard::Op::Eq && !g.rhs_is_field && g.lhs.kind != Field::Kind::FloatValue;
}

struct Cand {
  int32_t id;
  std::vector<Guard> guards;
};

class Emitter {
 public:
  std::string out;

  void line(int depth, const std::string& s) { out += std::string(2 * depth, ' ') + s + "\n"; }

  void tree(std::vector<Cand> cands, int depth) {
    if (cands.empty()) { line(depth, "return -1;"); return; }
    hoist_common(cands, depth);

    // Split on the switchable field that the most candidates constrain (ties: more distinct values).
    std::map<std::string, std::pair<Field, std::map<int64_t, int>>> fields;  // field text -> values
    for (const auto& c : cands)
      for (const auto& g : c.guards)
        if (switchable(g)) {
          auto& e = fields[field_expr(g.lhs)];
          e.first = g.lhs;
          e.second[g.rhs_int]++;
        }
    if (fields.empty()) { leaf_checks(cands, depth); return; }
    const std::pair<Field, std::map<int64_t, int>>* best = nullptr;
    int best_cover = -1;
    for (const auto& [name, e] : fields) {
      int cover = 0;
      for (const auto& [v, n] : e.second) cover += n;
      if (cover > best_cover || (cover == best_cover && e.second.size() > best->second.size())) {
        best = &e;
        best_cover = cover;
      }
    }
    const Field split = best->first;

    std::map<int64_t, std::vector<Cand>> branches;
    std::vector<Cand> unconstrained;
    for (auto& c : cands) {
      auto it = std::find_if(c.guards.begin(), c.guards.end(),
                             [&](const Guard& g) { return switchable(g) && g.lhs == split; });
      if (it == c.guards.end()) { unconstrained.push_back(c); continue; }
      int64_t v = it->rhs_int;
      Cand reduced = c;
      reduced.guards.erase(reduced.guards.begin() + (it - c.guards.begin()));
      branches[v].push_back(std::move(reduced));
    }
    // The switch value is widened to int64 so every case label compares exactly (an int32 field
    // switched with an int64 label would otherwise be truncated into a false match).
    std::string on = "switch ((int64_t)(" + field_expr(split) + ")) {";
    if (unconstrained.empty() && picked_from_a_table(split, branches, depth)) return;
    if (unconstrained.empty()) {
      line(depth, on);
      for (auto& [v, members] : branches) {
        line(depth + 1, "case " + int_literal(v) + ": {");
        tree(members, depth + 2);
        line(depth + 1, "}");
      }
      line(depth + 1, "default: return -1;");
      line(depth, "}");
      return;
    }
    // Candidates that do not constrain the split field could match on any branch. Rather than copy
    // them into every branch (code size exponential in the number of splits), the branch and the
    // unconstrained group are decided by separate functions, and the lower id wins.
    line(depth, "int32_t r = -1;");
    line(depth, on);
    for (auto& [v, members] : branches)
      line(depth + 1, "case " + int_literal(v) + ": r = " + function_for(members) + "(c); break;");
    line(depth + 1, "default: break;");
    line(depth, "}");
    line(depth, "const int32_t u = " + function_for(unconstrained) + "(c);");
    line(depth, "return (r >= 0 && (u < 0 || r < u)) ? r : u;");
  }

  std::string functions;  // helper functions, each defined before its first use
  GuardTables tables;     // data the guards read through c->tables
  bool picks = false;     // the code calls trd_pick
  int32_t ids_named = 0;  // 1 + the highest spec id the code names (ids in pick tables are data)

 private:
  int next_function_ = 0;

  // A split whose every branch is one candidate with nothing left to check (one spec per int value,
  // per size: what a module grows by) is a table of (value, spec) pairs the code looks up, not a
  // case per spec: the code then stays the same as specs are added, and so does its object, which
  // the disk cache then already holds (no compile per added spec). From two branches on: the second
  // spec's selector is then the last one compiled, whatever the module grows to.
  bool picked_from_a_table(const Field& split, const std::map<int64_t, std::vector<Cand>>& branches, int depth) {
    if (branches.size() < kMinPickTable) return false;
    std::vector<int64_t> t{static_cast<int64_t>(branches.size())};
    for (const auto& [v, members] : branches) {
      if (members.size() != 1 || !members[0].guards.empty()) return false;
      t.push_back(v);
      t.push_back(members[0].id);
    }
    tables.tables.push_back(std::move(t));
    picks = true;
    line(depth, "return trd_pick((int64_t)(" + field_expr(split) + "), c->tables[" +
                    std::to_string(tables.tables.size() - 1) + "], c->after);");
    return true;
  }
  static constexpr size_t kMinPickTable = 2;

  std::string function_for(const std::vector<Cand>& cands) {
    std::string name = "trd_select_" + std::to_string(next_function_++);
    std::string saved;
    saved.swap(out);
    line(0, "static int32_t " + name + "(const trd_call* c) {");
    tree(cands, 1);
    line(0, "}");
    functions += out;
    out.swap(saved);
    return name;
  }

  void hoist_common(std::vector<Cand>& cands, int depth) {
    std::map<std::string, int> count;
    for (const auto& c : cands) {
      std::set<std::string> seen;
      for (const auto& g : c.guards)
        if (seen.insert(key(g)).second) count[key(g)]++;
    }
    std::set<std::string> emitted;
    for (const auto& g : cands[0].guards) {
      std::string k = key(g);
      if (count[k] == static_cast<int>(cands.size()) && emitted.insert(k).second)
        line(depth, "if (!(" + guard_expr(g, &tables) + ")) return -1;");
    }
    for (auto& c : cands)
      c.guards.erase(std::remove_if(c.guards.begin(), c.guards.end(),
                                    [&](const Guard& g) { return emitted.count(key(g)) > 0; }),
                     c.guards.end());
  }

  void leaf_checks(const std::vector<Cand>& cands, int depth) {
    for (const auto& c : cands) {
      ids_named = std::max(ids_named, c.id + 1);
      const std::string after = "c->after < " + std::to_string(c.id);
      if (c.guards.empty()) { line(depth, "if (" + after + ") return " + std::to_string(c.id) + ";"); continue; }
      std::string cond = after;
      for (const auto& g : c.guards) cond += " && (" + guard_expr(g, &tables) + ")";
      line(depth, "if (" + cond + ") return " + std::to_string(c.id) + ";");
    }
    line(depth, "return -1;");
  }
};

}  // namespace

std::string c_expr(const ir::Expr& e, GuardTables* tables);

// no_overlap (ir/expr.h) as a call of emit_c.cpp's trd_no_overlap: the arguments' triples as a
// writable local array (the helper sorts it), the state's extents as two guard tables (GuardTables)
// sorted by start with a running maximum of their ends: all of it, and the written part.
std::string no_overlap_expr(const ir::Expr& e, GuardTables* tables) {
  using K = ir::Expr::Kind;
  std::vector<std::string> leaf;
  struct Extent { int64_t start, end, cls; };
  std::vector<Extent> state;
  for (size_t k = 0; k < e.args.size(); k += 3) {
    const int64_t cls = e.args[k]->value;
    if (cls == ir::kWrittenState || cls == ir::kReadState) {
      TRD_INTERNAL_ASSERT(e.args[k + 1]->kind == K::Int && e.args[k + 2]->kind == K::Int,
                          "no_overlap: module state extents must be literals");
      if (e.args[k + 2]->value > 0)
        state.push_back({e.args[k + 1]->value, e.args[k + 1]->value + e.args[k + 2]->value, cls});
    } else {
      leaf.push_back(int_literal(cls) + ", " + c_expr(*e.args[k + 1], tables) + ", " + c_expr(*e.args[k + 2], tables));
    }
  }
  if (leaf.empty()) return "INT64_C(1)";  // state against state is not checked
  auto table = [&](bool written_only) -> std::pair<std::string, size_t> {
    std::vector<Extent> t;
    for (const auto& x : state)
      if (!written_only || x.cls == ir::kWrittenState) t.push_back(x);
    if (t.empty()) return {"NULL", 0};
    TRD_INTERNAL_ASSERT(tables, "no_overlap over module state needs guard tables");
    std::sort(t.begin(), t.end(), [](const Extent& a, const Extent& b) { return a.start < b.start; });
    std::vector<int64_t> body;
    int64_t run = INT64_MIN;
    for (const auto& x : t) {
      run = std::max(run, x.end);
      body.push_back(x.start);
      body.push_back(run);
    }
    tables->tables.push_back(std::move(body));
    return {"c->tables[" + std::to_string(tables->tables.size() - 1) + "]", t.size()};
  };
  auto all = table(false), written = table(true);
  std::string items;
  for (const auto& l : leaf) items += (items.empty() ? "" : ", ") + l;
  return "trd_no_overlap((int64_t[]){" + items + "}, " + std::to_string(leaf.size()) + ", " + all.first + ", " +
         std::to_string(all.second) + ", " + written.first + ", " + std::to_string(written.second) + ")";
}

// C for a guard expression; floor division and modulo go through the safe helpers (0 on a zero
// divisor) so that a guard can fail but never trap.
std::string c_expr(const ir::Expr& e, GuardTables* tables) {
  using K = ir::Expr::Kind;
  auto a = [&](int k) { return c_expr(*e.args[k], tables); };
  switch (e.kind) {
    case K::Int: return int_literal(e.value);
    case K::Field: return "(int64_t)(" + field_expr(e.field) + ")";
    case K::Neg: return "(-" + a(0) + ")";
    case K::Not: return "(!" + a(0) + ")";
    case K::Add: return "(" + a(0) + " + " + a(1) + ")";
    case K::Sub: return "(" + a(0) + " - " + a(1) + ")";
    case K::Mul: return "(" + a(0) + " * " + a(1) + ")";
    case K::FloorDiv: return "trd_gfloordiv(" + a(0) + ", " + a(1) + ")";
    case K::Mod: return "trd_gmod(" + a(0) + ", " + a(1) + ")";
    case K::Eq: return "(" + a(0) + " == " + a(1) + ")";
    case K::Ne: return "(" + a(0) + " != " + a(1) + ")";
    case K::Lt: return "(" + a(0) + " < " + a(1) + ")";
    case K::Le: return "(" + a(0) + " <= " + a(1) + ")";
    case K::Gt: return "(" + a(0) + " > " + a(1) + ")";
    case K::Ge: return "(" + a(0) + " >= " + a(1) + ")";
    case K::And: return "(" + a(0) + " && " + a(1) + ")";
    case K::Or: return "(" + a(0) + " || " + a(1) + ")";
    case K::Max: return "trd_max(" + a(0) + ", " + a(1) + ")";
    case K::Min: return "trd_min(" + a(0) + ", " + a(1) + ")";
    case K::Disjoint: return "trd_disjoint(" + a(0) + ", " + a(1) + ", " + a(2) + ", " + a(3) + ")";
    case K::NoOverlap: return no_overlap_expr(e, tables);
  }
  return "0";
}

std::string guard_expr(const Guard& g, GuardTables* tables) {
  if (g.expr) return c_expr(*g.expr, tables) + " != 0";
  std::string lhs = field_expr(g.lhs);
  if (g.lhs.kind == Field::Kind::FloatValue && !g.rhs_is_field) {
    // Every comparison with NaN is false except !=, as in C and Python.
    if (std::isnan(g.rhs_float)) return g.op == Guard::Op::Ne ? "1" : "0";
    // (In)equality with a number the trace baked in is by bit pattern: -0.0 is not 0.0 there
    // (x / s differs in sign), so a value equal as a double but not as bits must miss.
    if (g.op == Guard::Op::Eq || g.op == Guard::Op::Ne)
      return "trd_fbits(" + lhs + ") " + ir::guard_op_name(g.op) + " " + int_literal(ir::float_bits(g.rhs_float));
    return lhs + " " + ir::guard_op_name(g.op) + " " + float_literal(g.rhs_float);
  }
  std::string rhs = g.rhs_is_field ? field_expr(g.rhs_field) : int_literal(g.rhs_int);
  switch (g.op) {
    // Through helpers that never trap (divisor 0, INT64_MIN % -1).
    case Guard::Op::DivisibleBy: return "trd_divisible(" + lhs + ", " + rhs + ")";
    case Guard::Op::NotDivisibleBy: return "trd_not_divisible(" + lhs + ", " + rhs + ")";
    default: return lhs + " " + ir::guard_op_name(g.op) + " " + rhs;
  }
}

EmittedSelect emit_select(const std::vector<ir::Spec>& specs) {
  Emitter e;
  e.line(0, "static int32_t trd_select(const trd_call* c) {");
  // Group by structure, keeping first-appearance order.
  std::vector<std::string> order;
  std::map<std::string, std::vector<Cand>> groups;
  for (const auto& s : specs) {
    if (!groups.count(s.structure)) order.push_back(s.structure);
    Cand c{s.id, s.guards};
    Guard n;
    n.lhs.kind = Field::Kind::NumLeaves;
    n.rhs_int = ir::count_structure_leaves(s.structure);
    c.guards.insert(c.guards.begin(), n);
    groups[s.structure].push_back(std::move(c));
  }
  for (const auto& st : order) {
    e.line(1, "if (c->structure_len == " + std::to_string(st.size()) + " && memcmp(c->structure, " +
                  ir::quote(st) + ", " + std::to_string(st.size()) + ") == 0) {");
    e.tree(groups[st], 2);
    e.line(1, "}");
  }
  e.line(1, "return -1;");
  e.line(0, "}");
  // trd_pick: the spec of value v in a pick table [n, v0, id0, v1, id1, ...] (values ascending),
  // when it is later than c->after; else -1.
  const std::string pick =
      e.picks ? "static int32_t trd_pick(int64_t v, const int64_t* t, int32_t after) {\n"
                "  int64_t lo = 0, hi = t[0];\n"
                "  while (lo < hi) {\n"
                "    const int64_t mid = lo + (hi - lo) / 2;\n"
                "    if (t[1 + 2 * mid] < v) lo = mid + 1; else hi = mid;\n"
                "  }\n"
                "  if (lo < t[0] && t[1 + 2 * lo] == v && after < t[2 + 2 * lo]) return (int32_t)t[2 + 2 * lo];\n"
                "  return -1;\n"
                "}\n"
              : "";
  return {pick + e.functions + e.out, std::move(e.tables), e.ids_named};
}

}  // namespace trident::guards
