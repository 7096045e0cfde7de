// Parser for the host IR text form. Recursive descent over a small tokenizer; `#` starts a comment.
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "ir/expr.h"
#include "ir/text.h"

namespace trident::ir {
namespace {

class Lexer {
 public:
  explicit Lexer(const std::string& text) : t_(text) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw ParseError("host IR line " + std::to_string(line_) + ": expected " + what + ", found '" +
                     peek_text() + "'");
  }

  void skip_space() {
    while (p_ < t_.size()) {
      char c = t_[p_];
      if (c == '\n') { ++line_; ++p_; }
      else if (c == ' ' || c == '\t' || c == '\r') ++p_;
      else if (c == '#') { while (p_ < t_.size() && t_[p_] != '\n') ++p_; }
      else break;
    }
  }
  bool at_end() { skip_space(); return p_ >= t_.size(); }
  char peek() { skip_space(); return p_ < t_.size() ? t_[p_] : '\0'; }
  std::string peek_text() const { return t_.substr(p_, std::min<size_t>(16, t_.size() - p_)); }

  bool accept(const char* tok) {
    skip_space();
    size_t n = std::strlen(tok);
    if (t_.compare(p_, n, tok) != 0) return false;
    // A word token must not run into more word characters ("int" is not a prefix of "int8").
    if (std::isalpha(static_cast<unsigned char>(tok[n - 1])) && p_ + n < t_.size() &&
        (std::isalnum(static_cast<unsigned char>(t_[p_ + n])) || t_[p_ + n] == '_'))
      return false;
    p_ += n;
    return true;
  }
  void advance(size_t n) { skip_space(); p_ += n; }
  // One character right here (no space skipped): the `f` of `$fN`.
  bool accept_char(char c) {
    if (p_ < t_.size() && t_[p_] == c) { ++p_; return true; }
    return false;
  }
  void expect(const char* tok) { if (!accept(tok)) fail(std::string("'") + tok + "'"); }

  std::string word() {
    skip_space();
    size_t b = p_;
    while (p_ < t_.size() && (std::isalnum(static_cast<unsigned char>(t_[p_])) || t_[p_] == '_')) ++p_;
    if (b == p_) fail("a name");
    return t_.substr(b, p_ - b);
  }

  // Whether an integer comes next (a digit, or a minus sign and a digit).
  bool peek_integer() {
    skip_space();
    size_t q = p_ + (p_ < t_.size() && t_[p_] == '-');
    return q < t_.size() && std::isdigit(static_cast<unsigned char>(t_[q]));
  }

  int64_t integer() {
    skip_space();
    const char* b = t_.c_str() + p_;
    char* e = nullptr;
    long long v = std::strtoll(b, &e, 10);
    if (e == b) fail("an integer");
    p_ += e - b;
    return v;
  }

  // A number token: returns true and sets f for floats, false and sets i for integers.
  bool number(int64_t& i, double& f) {
    skip_space();
    if (accept("nan")) { f = NAN; return true; }
    if (accept("inf")) { f = INFINITY; return true; }
    if (accept("-inf")) { f = -INFINITY; return true; }
    size_t b = p_;
    size_t e = p_;
    if (e < t_.size() && (t_[e] == '-' || t_[e] == '+')) ++e;
    bool is_float = false;
    while (e < t_.size()) {
      char c = t_[e];
      if (std::isdigit(static_cast<unsigned char>(c))) { ++e; continue; }
      if (c == '.' || c == 'e' || c == 'E') { is_float = true; ++e; continue; }
      if ((c == '-' || c == '+') && (t_[e - 1] == 'e' || t_[e - 1] == 'E')) { ++e; continue; }
      break;
    }
    if (e == b) fail("a number");
    std::string tok = t_.substr(b, e - b);
    p_ = e;
    if (is_float) { f = std::strtod(tok.c_str(), nullptr); return true; }
    i = std::strtoll(tok.c_str(), nullptr, 10);
    return false;
  }

  std::string string() {
    skip_space();
    if (p_ >= t_.size() || t_[p_] != '"') fail("a string");
    std::string s;
    for (++p_; p_ < t_.size() && t_[p_] != '"'; ++p_) {
      if (t_[p_] == '\\' && p_ + 1 < t_.size()) {
        ++p_;
        if (p_ + 2 < t_.size() && is_octal(t_[p_]) && is_octal(t_[p_ + 1]) && is_octal(t_[p_ + 2])) {
          int v = (t_[p_] - '0') * 64 + (t_[p_ + 1] - '0') * 8 + (t_[p_ + 2] - '0');
          if (v > 255) fail("an octal escape below \\400");
          s += static_cast<char>(v);
          p_ += 2;
        } else {
          s += t_[p_] == 'n' ? '\n' : t_[p_];
        }
      } else {
        s += t_[p_];
      }
    }
    if (p_ >= t_.size()) fail("closing '\"'");
    ++p_;
    return s;
  }

  static bool is_octal(char c) { return c >= '0' && c <= '7'; }

 private:
  const std::string& t_;
  size_t p_ = 0;
  int line_ = 1;
};

int64_t enum_literal(Lexer& lx) {
  lx.expect("(");
  int64_t v = lx.integer();
  lx.expect(")");
  return v;
}

Operand operand(Lexer& lx);

// {"name": operand, 3: operand, ...} into o.keys / o.items (an int key marked in o.int_keys).
void named_items(Lexer& lx, Operand& o) {
  lx.expect("{");
  while (!lx.accept("}")) {
    const char c = lx.peek();
    if (c == '-' || (c >= '0' && c <= '9')) {
      o.int_keys.resize(o.keys.size() + 1, false);
      o.int_keys.back() = true;
      o.keys.push_back(std::to_string(lx.integer()));
    } else {
      o.keys.push_back(lx.string());
    }
    lx.expect(":");
    o.items.push_back(operand(lx));
    if (!lx.accept(",")) { lx.expect("}"); break; }
  }
}

Operand operand(Lexer& lx) {
  using K = Operand::Kind;
  Operand o;
  char c = lx.peek();
  if (c == '%' || c == '$') {
    lx.accept(c == '%' ? "%" : "$");
    o.kind = c == '%' ? K::Value : K::Sym;
    if (c == '$' && lx.accept_char('f')) o.j = 1;  // $fN: a float symbol
    o.i = lx.integer();
    return o;
  }
  if (c == '"') { o.kind = K::Str; o.s = lx.string(); return o; }
  if (c == '[' || c == '(') {
    bool is_list = c == '[';
    lx.accept(is_list ? "[" : "(");
    o.kind = is_list ? K::List : K::Tuple;
    const char* close = is_list ? "]" : ")";
    while (!lx.accept(close)) {
      o.items.push_back(operand(lx));
      if (!lx.accept(",")) { lx.expect(close); break; }
    }
    return o;
  }
  if (c == '{') {
    o.kind = K::Dict;
    named_items(lx, o);
    return o;
  }
  if (lx.accept("node")) { o.kind = K::Node; o.i = enum_literal(lx); return o; }
  if (lx.accept("pyref")) { o.kind = K::PyRef; o.i = enum_literal(lx); return o; }
  if (lx.accept("object")) {
    o.kind = K::Object;
    o.i = enum_literal(lx);
    if (lx.accept("seq")) {  // object(K) seq (v, ...): a tuple class built from its items
      o.j = 2;
      lx.expect("(");
      while (!lx.accept(")")) {
        o.items.push_back(operand(lx));
        if (!lx.accept(",")) { lx.expect(")"); break; }
      }
      return o;
    }
    if (lx.accept("call")) o.j = 1;
    named_items(lx, o);
    return o;
  }
  if (lx.accept("update")) {
    o.kind = K::Update;
    o.i = enum_literal(lx);
    if (lx.peek() == '[') {
      Operand list = operand(lx);
      o.items = std::move(list.items);
      o.j = 1;
    } else {
      named_items(lx, o);
    }
    return o;
  }
  if (lx.accept("effects")) {
    o.kind = K::Effects;
    lx.expect("(");
    while (!lx.accept(")")) {
      o.items.push_back(operand(lx));
      if (!lx.accept(",")) { lx.expect(")"); break; }
    }
    return o;
  }
  if (lx.accept("none")) return o;
  if (lx.accept("arg")) { o.kind = K::ArgRef; o.i = enum_literal(lx); return o; }
  if (lx.accept("ptr")) {
    o.kind = K::Ptr;
    lx.expect("(");
    o.items.push_back(operand(lx));
    lx.expect(",");
    o.items.push_back(operand(lx));
    lx.expect(")");
    return o;
  }
  if (lx.accept("state")) { o.kind = K::StateRef; o.i = enum_literal(lx); return o; }
  if (lx.accept("true")) { o.kind = K::Bool; o.i = 1; return o; }
  if (lx.accept("false")) { o.kind = K::Bool; o.i = 0; return o; }
  if (lx.accept("dtype")) { o.kind = K::Dtype; o.i = enum_literal(lx); return o; }
  if (lx.accept("layout")) { o.kind = K::Layout; o.i = enum_literal(lx); return o; }
  if (lx.accept("memfmt")) { o.kind = K::MemFmt; o.i = enum_literal(lx); return o; }
  if (lx.accept("device")) {
    o.kind = K::Device;
    lx.expect("(");
    o.i = lx.integer();
    lx.expect(":");
    o.j = lx.integer();
    lx.expect(")");
    return o;
  }
  int64_t i = 0;
  double f = 0;
  if (lx.number(i, f)) { o.kind = K::Float; o.f = f; }
  else { o.kind = K::Int; o.i = i; }
  return o;
}

Field field(Lexer& lx) {
  Field f;
  if (lx.peek() == 'L') {
    lx.advance(1);
    f.leaf = static_cast<int32_t>(lx.integer());
    lx.expect(".");
  }
  std::string name = lx.word();
  for (int k = 0; k < kNumFieldKinds; ++k) {
    if (name == field_name(static_cast<Field::Kind>(k))) {
      f.kind = static_cast<Field::Kind>(k);
      if (field_shape(f.kind) == Field::Shape::DIM) {
        lx.expect("[");
        f.index = static_cast<int32_t>(lx.integer());
        lx.expect("]");
      }
      bool global = field_shape(f.kind) == Field::Shape::CALL;
      if (global != (f.leaf < 0)) lx.fail(global ? "a global field without L<n>." : "L<n>. before a leaf field");
      return f;
    }
  }
  lx.fail("a guard field name");
}

Guard guard(Lexer& lx) {
  Guard g;
  if (lx.accept("expr")) {
    g.expr = parse_expr(lx.string());
    return g;
  }
  g.lhs = field(lx);
  bool found = false;
  // Longest spellings first so that ">=" is not read as ">".
  for (Guard::Op op : {Guard::Op::Eq, Guard::Op::Ne, Guard::Op::Ge, Guard::Op::Le, Guard::Op::Gt,
                       Guard::Op::Lt, Guard::Op::NotDivisibleBy, Guard::Op::DivisibleBy}) {
    if (lx.accept(guard_op_name(op))) { g.op = op; found = true; break; }
  }
  if (!found) lx.fail("a guard operator");
  char c = lx.peek();
  bool float_rhs = g.lhs.kind == Field::Kind::FloatValue;
  if (c == 'L' || (!float_rhs && (c == 'g' || c == 'n'))) {
    g.rhs_is_field = true;
    g.rhs_field = field(lx);
  } else if (float_rhs) {
    int64_t i = 0;
    double f = 0;
    g.rhs_float = lx.number(i, f) ? f : static_cast<double>(i);
  } else {
    g.rhs_int = lx.integer();
  }
  return g;
}

std::vector<int64_t> results(Lexer& lx, char sigil) {
  std::vector<int64_t> r;
  do {
    lx.expect(sigil == '%' ? "%" : "$");
    r.push_back(lx.integer());
  } while (lx.accept(","));
  lx.expect("=");
  return r;
}

std::vector<Operand> operand_list(Lexer& lx) {
  std::vector<Operand> ops;
  lx.expect("(");
  while (!lx.accept(")")) {
    ops.push_back(operand(lx));
    if (!lx.accept(",")) { lx.expect(")"); break; }
  }
  return ops;
}

// `launch K grid(g0, g1, g2) (operands)`, after the keyword.
void launch_rest(Lexer& lx, Instr& in) {
  in.kind = Instr::Kind::Launch;
  in.a = lx.integer();
  lx.expect("grid");
  in.grid = operand_list(lx);
  in.operands = operand_list(lx);
}

// `float K`, `item %v` or `<fop> a[, b]`, after `$fN =`.
void float_rest(Lexer& lx, Instr& in) {
  std::string w = lx.word();
  if (w == "item") {
    in.kind = Instr::Kind::Item;
    lx.expect("%");
    in.a = lx.integer();
    in.b = 1;
    return;
  }
  if (w == "float") {
    in.kind = Instr::Kind::FloatLeaf;
    in.a = lx.integer();
    return;
  }
  for (int k = 0; k <= static_cast<int>(Instr::FloatOp::FromInt); ++k) {
    auto op = static_cast<Instr::FloatOp>(k);
    if (w != float_op_name(op)) continue;
    in.kind = Instr::Kind::FloatOp;
    in.fop = op;
    for (int n = 0; n < float_op_arity(op); ++n) {
      if (n) lx.expect(",");
      in.operands.push_back(operand(lx));
    }
    return;
  }
  lx.fail("float or a float operator");
}

Instr instr(Lexer& lx) {
  using K = Instr::Kind;
  Instr in;
  if (lx.accept("return")) { in.kind = K::Return; in.operands.push_back(operand(lx)); return in; }
  if (lx.accept("release")) { in.kind = K::Release; lx.expect("%"); in.a = lx.integer(); return in; }
  if (lx.accept("call")) { in.kind = K::Call; in.op = lx.string(); in.operands = operand_list(lx); return in; }
  if (lx.accept("launch")) { launch_rest(lx, in); return in; }
  if (lx.peek() == 'c' || lx.peek() == 'e') {
    const bool expect = lx.accept("expect");
    if (!expect && !lx.accept("check")) lx.fail("an instruction");
    in.kind = K::Check;
    in.b = expect ? 1 : 0;
    in.operands.push_back(operand(lx));
    lx.expect(",");
    in.op = lx.string();
    return in;
  }
  char sigil = lx.peek();
  if (sigil != '%' && sigil != '$') lx.fail("an instruction");
  if (sigil == '$') {  // `$fN = ...`: a float instruction
    lx.expect("$");
    if (lx.accept_char('f')) {
      in.results.push_back(lx.integer());
      lx.expect("=");
      float_rest(lx, in);
      return in;
    }
    in.results.push_back(lx.integer());
    lx.expect("=");
  } else {
    in.results = results(lx, sigil);
  }
  std::string w = lx.word();
  if (sigil == '%') {
    if (w == "arg" || w == "state") { in.kind = w == "arg" ? K::Arg : K::State; in.a = lx.integer(); return in; }
    if (w == "call") { in.kind = K::Call; in.op = lx.string(); in.operands = operand_list(lx); return in; }
    if (w == "launch") { launch_rest(lx, in); return in; }
    lx.fail("arg, state, call or launch");
  }
  if (w == "int") { in.kind = K::SymLeaf; in.a = lx.integer(); return in; }
  if (w == "item") { in.kind = K::Item; lx.expect("%"); in.a = lx.integer(); return in; }
  if (w == "size" || w == "stride") {
    in.kind = w == "size" ? K::SymSize : K::SymStride;
    lx.expect("%");
    in.a = lx.integer();
    lx.expect(",");
    in.b = lx.integer();
    return in;
  }
  for (int k = 0; k <= static_cast<int>(Instr::BinOp::Ge); ++k) {
    if (w == binop_name(static_cast<Instr::BinOp>(k))) {
      in.kind = K::SymBin;
      in.binop = static_cast<Instr::BinOp>(k);
      in.operands.push_back(operand(lx));
      lx.expect(",");
      in.operands.push_back(operand(lx));
      return in;
    }
  }
  lx.fail("int, item, size, stride or a symbolic operator");
}

Kernel kernel(Lexer& lx) {
  Kernel k;
  k.id = static_cast<int32_t>(lx.integer());
  k.name = lx.string();
  k.cubin = lx.string();
  k.params = lx.string();
  auto field = [&](const char* key) { lx.expect(key); return lx.integer(); };
  k.num_warps = static_cast<int32_t>(field("warps"));
  k.num_ctas = static_cast<int32_t>(field("ctas"));
  k.shared = static_cast<int32_t>(field("shared"));
  k.global_scratch = field("gscratch");
  k.global_scratch_align = lx.integer();
  k.profile_scratch = field("pscratch");
  k.profile_scratch_align = lx.integer();
  k.launch_pdl = static_cast<int32_t>(field("pdl"));
  k.cooperative = static_cast<int32_t>(field("coop"));
  while (lx.accept("tma")) {
    TmaParam t;
    t.swizzle = static_cast<int32_t>(lx.integer());
    t.elem_size = static_cast<int32_t>(lx.integer());
    t.elem_type = static_cast<int32_t>(lx.integer());
    t.fp4_padded = lx.integer() != 0;
    t.nan_padding = lx.integer() != 0;
    do t.block.push_back(lx.integer());
    while (lx.peek_integer());
    k.tma.push_back(std::move(t));
  }
  return k;
}

}  // namespace

Kernel parse_kernel(const std::string& text) {
  Lexer lx(text);
  lx.expect("kernel");
  Kernel k = kernel(lx);
  if (!lx.at_end()) lx.fail("end of kernel declaration");
  return k;
}

Module parse_module(const std::string& text) {
  Lexer lx(text);
  Module m;
  while (!lx.at_end()) {
    lx.expect("spec");
    Spec s;
    s.id = static_cast<int32_t>(lx.integer());
    lx.expect("structure");
    s.structure = lx.string();
    lx.expect("{");
    while (!lx.accept("}")) {
      if (lx.accept("guard")) s.guards.push_back(guard(lx));
      else if (lx.accept("kernel")) s.kernels.push_back(kernel(lx));
      else if (lx.accept("writes")) {
        do s.writes.push_back(static_cast<int32_t>(lx.integer()));
        while (lx.accept(","));
      } else if (lx.accept("graph")) {
        const bool reads = lx.accept("reads");
        if (!reads) lx.expect("off");
        std::string& why = reads ? s.host_read : s.graph_off;
        why = lx.string();
        if (why.empty()) lx.fail("a nonempty reason");
      } else s.body.push_back(instr(lx));
    }
    m.specs.push_back(std::move(s));
  }
  return m;
}

Instr parse_instr(const std::string& text) {
  Lexer lx(text);
  Instr in = instr(lx);
  if (!lx.at_end()) lx.fail("end of instruction");
  return in;
}

Operand parse_operand(const std::string& text) {
  Lexer lx(text);
  Operand o = operand(lx);
  if (!lx.at_end()) lx.fail("end of operand");
  return o;
}

}  // namespace trident::ir
