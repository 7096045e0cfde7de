#include "ir/expr.h"

#include <cctype>
#include <cstdlib>

#include "ir/text.h"

namespace trident::ir {
namespace {

using K = Expr::Kind;

class ExprParser {
 public:
  explicit ExprParser(const std::string& t) : t_(t) {}

  ExprPtr parse() {
    ExprPtr e = disjunction();
    skip();
    if (p_ != t_.size()) fail("end of expression");
    return e;
  }

 private:
  const std::string& t_;
  size_t p_ = 0;

  [[noreturn]] void fail(const std::string& what) {
    throw ParseError("guard expression '" + t_ + "' at " + std::to_string(p_) + ": expected " + what);
  }
  void skip() { while (p_ < t_.size() && std::isspace(static_cast<unsigned char>(t_[p_]))) ++p_; }
  bool accept(const char* tok) {
    skip();
    size_t n = std::char_traits<char>::length(tok);
    if (t_.compare(p_, n, tok) != 0) return false;
    if (std::isalpha(static_cast<unsigned char>(tok[0])) && p_ + n < t_.size() &&
        (std::isalnum(static_cast<unsigned char>(t_[p_ + n])) || t_[p_ + n] == '_'))
      return false;
    p_ += n;
    return true;
  }
  static ExprPtr node(K k, std::vector<ExprPtr> args) {
    auto e = std::make_shared<Expr>();
    e->kind = k;
    e->args = std::move(args);
    return e;
  }

  ExprPtr disjunction() {
    ExprPtr e = conjunction();
    while (accept("or")) e = node(K::Or, {e, conjunction()});
    return e;
  }
  ExprPtr conjunction() {
    ExprPtr e = negation();
    while (accept("and")) e = node(K::And, {e, negation()});
    return e;
  }
  ExprPtr negation() {
    if (accept("not")) return node(K::Not, {negation()});
    return comparison();
  }
  ExprPtr comparison() {
    ExprPtr e = sum();
    static const std::pair<const char*, K> ops[] = {{"==", K::Eq}, {"!=", K::Ne}, {"<=", K::Le},
                                                    {">=", K::Ge}, {"<", K::Lt}, {">", K::Gt}};
    for (const auto& [tok, k] : ops)
      if (accept(tok)) return node(k, {e, sum()});
    return e;
  }
  ExprPtr sum() {
    ExprPtr e = term();
    for (;;) {
      if (accept("+")) e = node(K::Add, {e, term()});
      else if (accept("-")) e = node(K::Sub, {e, term()});
      else return e;
    }
  }
  ExprPtr term() {
    ExprPtr e = unary();
    for (;;) {
      if (accept("*")) e = node(K::Mul, {e, unary()});
      else if (accept("//")) e = node(K::FloorDiv, {e, unary()});
      else if (accept("%")) e = node(K::Mod, {e, unary()});
      else return e;
    }
  }
  ExprPtr unary() {
    if (accept("-")) return node(K::Neg, {unary()});
    return atom();
  }
  ExprPtr atom() {
    skip();
    if (accept("(")) {
      ExprPtr e = disjunction();
      if (!accept(")")) fail("')'");
      return e;
    }
    if (accept("no_overlap")) {
      if (!accept("(")) fail("'('");
      std::vector<ExprPtr> a{disjunction()};
      while (accept(",")) a.push_back(disjunction());
      if (!accept(")")) fail("')'");
      if (a.size() % 3 != 0) fail("no_overlap arguments in triples (class, pointer, bytes)");
      for (size_t k = 0; k < a.size(); k += 3)
        if (a[k]->kind != K::Int || a[k]->value < 0 || a[k]->value > 4) fail("a no_overlap class 0..4");
      return node(K::NoOverlap, std::move(a));
    }
    if (accept("disjoint")) {
      if (!accept("(")) fail("'('");
      std::vector<ExprPtr> a{disjunction()};
      for (int i = 0; i < 3; ++i) {
        if (!accept(",")) fail("','");
        a.push_back(disjunction());
      }
      if (!accept(")")) fail("')'");
      return node(K::Disjoint, std::move(a));
    }
    for (auto [tok, k] : {std::pair<const char*, K>{"max", K::Max}, {"min", K::Min}}) {
      if (accept(tok)) {
        if (!accept("(")) fail("'('");
        ExprPtr a = disjunction();
        if (!accept(",")) fail("','");
        ExprPtr b = disjunction();
        if (!accept(")")) fail("')'");
        return node(k, {a, b});
      }
    }
    if (p_ < t_.size() && std::isdigit(static_cast<unsigned char>(t_[p_]))) {
      char* end = nullptr;
      auto e = std::make_shared<Expr>();
      e->value = std::strtoll(t_.c_str() + p_, &end, 10);
      p_ = end - t_.c_str();
      return e;
    }
    // A field, in guard syntax: the guard parser reads it.
    size_t b = p_;
    while (p_ < t_.size() && (std::isalnum(static_cast<unsigned char>(t_[p_])) || t_[p_] == '.' ||
                              t_[p_] == '_' || t_[p_] == '[' || t_[p_] == ']'))
      ++p_;
    if (b == p_) fail("a number, a field or '('");
    Module m = parse_module("spec 0 structure \"\" { guard " + t_.substr(b, p_ - b) + " == 0 return none }");
    auto e = std::make_shared<Expr>();
    e->kind = K::Field;
    e->field = m.specs[0].guards[0].lhs;
    return e;
  }
};

const char* op_text(K k) {
  switch (k) {
    case K::Add: return " + ";
    case K::Sub: return " - ";
    case K::Mul: return " * ";
    case K::FloorDiv: return " // ";
    case K::Mod: return " % ";
    case K::Eq: return " == ";
    case K::Ne: return " != ";
    case K::Lt: return " < ";
    case K::Le: return " <= ";
    case K::Gt: return " > ";
    case K::Ge: return " >= ";
    case K::And: return " and ";
    case K::Or: return " or ";
    default: return "?";
  }
}

}  // namespace

ExprPtr parse_expr(const std::string& text) { return ExprParser(text).parse(); }

std::string print_expr(const Expr& e) {
  switch (e.kind) {
    case K::Int: return std::to_string(e.value);
    case K::Field: {
      Guard g;
      g.lhs = e.field;
      std::string s = print_guard(g);  // "guard <field> == 0"
      return s.substr(6, s.size() - 6 - 5);
    }
    case K::Neg: return "-(" + print_expr(*e.args[0]) + ")";
    case K::Not: return "not (" + print_expr(*e.args[0]) + ")";
    case K::Max: return "max(" + print_expr(*e.args[0]) + ", " + print_expr(*e.args[1]) + ")";
    case K::Min: return "min(" + print_expr(*e.args[0]) + ", " + print_expr(*e.args[1]) + ")";
    case K::Disjoint:
      return "disjoint(" + print_expr(*e.args[0]) + ", " + print_expr(*e.args[1]) + ", " + print_expr(*e.args[2]) +
             ", " + print_expr(*e.args[3]) + ")";
    case K::NoOverlap: {
      std::string s = "no_overlap(";
      for (size_t k = 0; k < e.args.size(); ++k) s += (k ? ", " : "") + print_expr(*e.args[k]);
      return s + ")";
    }
    default: return "(" + print_expr(*e.args[0]) + op_text(e.kind) + print_expr(*e.args[1]) + ")";
  }
}

void expr_fields(const Expr& e, std::vector<Field>& out) {
  if (e.kind == K::Field) out.push_back(e.field);
  for (const auto& a : e.args) expr_fields(*a, out);
}

}  // namespace trident::ir
