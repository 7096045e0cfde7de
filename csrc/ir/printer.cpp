// Canonical text of the host IR. The parser accepts exactly this (plus comments and free spacing).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "ir/expr.h"
#include "ir/text.h"

namespace trident::ir {
std::string quote(const std::string& s) {
  // Only printable ASCII other than '"', '\\' and '?' stands for itself; every other byte is a
  // three-digit octal escape. No byte of the string can then end the literal or form a trigraph
  // or line splice, in IR text or in generated C, and the bytes round-trip exactly (NUL included).
  std::string out = "\"";
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') { out += '\\'; out += ch; }
    else if (c == '\n') out += "\\n";
    else if (c >= 0x20 && c < 0x7f && c != '?') out += ch;
    else {
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\%03o", c);
      out += buf;
    }
  }
  return out + "\"";
}

int64_t float_bits(double v) {
  int64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

// Floats always carry a '.', an exponent, or a name, so that 1.0 never reads back as the int 1:
// ATen distinguishes int and float Scalars.
std::string print_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  // Shortest precision that reads back to the same double.
  char buf[40];
  for (int prec = 15; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

namespace {

std::string print_field(const Field& f) {
  std::string s;
  if (f.leaf >= 0) s = "L" + std::to_string(f.leaf) + ".";
  s += field_name(f.kind);
  if (field_shape(f.kind) == Field::Shape::DIM) s += "[" + std::to_string(f.index) + "]";
  return s;
}

}  // namespace

std::string print_operand(const Operand& o) {
  using K = Operand::Kind;
  switch (o.kind) {
    case K::None: return "none";
    case K::Bool: return o.i ? "true" : "false";
    case K::Int: return std::to_string(o.i);
    case K::Float: return print_float(o.f);
    case K::Str: return quote(o.s);
    case K::Dtype: return "dtype(" + std::to_string(o.i) + ")";
    case K::Layout: return "layout(" + std::to_string(o.i) + ")";
    case K::MemFmt: return "memfmt(" + std::to_string(o.i) + ")";
    case K::Device: return "device(" + std::to_string(o.i) + ":" + std::to_string(o.j) + ")";
    case K::Value: return "%" + std::to_string(o.i);
    case K::ArgRef: return "arg(" + std::to_string(o.i) + ")";
    case K::StateRef: return "state(" + std::to_string(o.i) + ")";
    case K::Sym: return (o.j == 1 ? "$f" : "$") + std::to_string(o.i);
    case K::Ptr:
      if (o.items.size() != 2) return "ptr(?)";
      return "ptr(" + print_operand(o.items[0]) + ", " + print_operand(o.items[1]) + ")";
    case K::List:
    case K::Tuple: {
      std::string s = o.kind == K::List ? "[" : "(";
      for (size_t k = 0; k < o.items.size(); ++k) {
        if (k) s += ", ";
        s += print_operand(o.items[k]);
      }
      // A one-element tuple keeps its comma, as in Python, so it never reads back as a grouping.
      if (o.kind == K::Tuple && o.items.size() == 1) s += ",";
      return s + (o.kind == K::List ? "]" : ")");
    }
    case K::Dict:
    case K::Object:
    case K::Update: {
      std::string s = o.kind == K::Dict ? "" : (o.kind == K::Object ? "object(" : "update(") + std::to_string(o.i) + ") ";
      if (o.kind == K::Object && o.j == 1) s += "call ";
      if (o.kind == K::Object && o.j == 2) {
        s += "seq (";
        for (size_t k = 0; k < o.items.size(); ++k) s += (k ? ", " : "") + print_operand(o.items[k]);
        return s + (o.items.size() == 1 ? ",)" : ")");
      }
      if (o.kind == K::Update && o.j == 1) {
        s += "[";
        for (size_t k = 0; k < o.items.size(); ++k) s += (k ? ", " : "") + print_operand(o.items[k]);
        return s + "]";
      }
      s += "{";
      for (size_t k = 0; k < o.items.size(); ++k) {
        if (k) s += ", ";
        s += (o.int_key(k) ? o.keys[k] : quote(o.keys[k])) + ": " + print_operand(o.items[k]);
      }
      return s + "}";
    }
    case K::Node: return "node(" + std::to_string(o.i) + ")";
    case K::PyRef: return "pyref(" + std::to_string(o.i) + ")";
    case K::Effects: {
      std::string s = "effects(";
      for (size_t k = 0; k < o.items.size(); ++k) s += (k ? ", " : "") + print_operand(o.items[k]);
      return s + ")";
    }
  }
  return "?";
}

std::string print_guard(const Guard& g) {
  if (g.expr) return "guard expr " + quote(print_expr(*g.expr));
  std::string s = "guard " + print_field(g.lhs) + " " + guard_op_name(g.op) + " ";
  if (g.rhs_is_field) s += print_field(g.rhs_field);
  else if (g.lhs.kind == Field::Kind::FloatValue) s += print_float(g.rhs_float);
  else s += std::to_string(g.rhs_int);
  return s;
}

std::string print_instr(const Instr& in) {
  using K = Instr::Kind;
  auto vals = [&](char sigil) {
    std::string s;
    for (size_t k = 0; k < in.results.size(); ++k) {
      if (k) s += ", ";
      s += sigil + std::to_string(in.results[k]);
    }
    return s;
  };
  auto args = [&](const std::vector<Operand>& ops) {
    std::string s = "(";
    for (size_t k = 0; k < ops.size(); ++k) {
      if (k) s += ", ";
      s += print_operand(ops[k]);
    }
    return s + ")";
  };
  switch (in.kind) {
    case K::Arg: return vals('%') + " = arg " + std::to_string(in.a);
    case K::State: return vals('%') + " = state " + std::to_string(in.a);
    case K::SymLeaf: return vals('$') + " = int " + std::to_string(in.a);
    case K::SymSize: return vals('$') + " = size %" + std::to_string(in.a) + ", " + std::to_string(in.b);
    case K::SymStride: return vals('$') + " = stride %" + std::to_string(in.a) + ", " + std::to_string(in.b);
    case K::SymBin:
      return vals('$') + " = " + binop_name(in.binop) + " " + print_operand(in.operands[0]) + ", " +
             print_operand(in.operands[1]);
    case K::FloatLeaf: return "$f" + std::to_string(in.results.at(0)) + " = float " + std::to_string(in.a);
    case K::Item:
      return (in.b == 1 ? "$f" : "$") + std::to_string(in.results.at(0)) + " = item %" + std::to_string(in.a);
    case K::Check:
      return (in.b == 1 ? "expect " : "check ") + print_operand(in.operands.at(0)) + ", " + quote(in.op);
    case K::FloatOp: {
      std::string s = "$f" + std::to_string(in.results.at(0)) + " = " + float_op_name(in.fop) + " ";
      for (size_t k = 0; k < in.operands.size(); ++k) s += (k ? ", " : "") + print_operand(in.operands[k]);
      return s;
    }
    case K::Call: {
      std::string lhs = in.results.empty() ? "" : vals('%') + " = ";
      return lhs + "call " + quote(in.op) + " " + args(in.operands);
    }
    case K::Launch: {
      std::string lhs = in.results.empty() ? "" : vals('%') + " = ";
      return lhs + "launch " + std::to_string(in.a) + " grid" + args(in.grid) + " " + args(in.operands);
    }
    case K::Release: return "release %" + std::to_string(in.a);
    case K::Return: return "return " + print_operand(in.operands.at(0));
  }
  return "?";
}

namespace {
std::string tma_clauses(const Kernel& k) {
  std::string out;
  for (const TmaParam& t : k.tma) {
    out += " tma " + std::to_string(t.swizzle) + " " + std::to_string(t.elem_size) + " " + std::to_string(t.elem_type) +
           " " + std::to_string(int(t.fp4_padded)) + " " + std::to_string(int(t.nan_padding));
    for (int64_t b : t.block) out += " " + std::to_string(b);
  }
  return out;
}
}  // namespace

std::string print_kernel(const Kernel& k) {
  auto n = [](int64_t v) { return std::to_string(v); };
  return "kernel " + n(k.id) + " " + quote(k.name) + " " + quote(k.cubin) + " " + quote(k.params) + " warps " +
         n(k.num_warps) + " ctas " + n(k.num_ctas) + " shared " + n(k.shared) + " gscratch " + n(k.global_scratch) +
         " " + n(k.global_scratch_align) + " pscratch " + n(k.profile_scratch) + " " + n(k.profile_scratch_align) +
         " pdl " + n(k.launch_pdl) + " coop " + n(k.cooperative) + tma_clauses(k);
}

std::string print(const Spec& s) {
  std::string out = "spec " + std::to_string(s.id) + " structure " + quote(s.structure) + " {\n";
  for (const auto& g : s.guards) out += "  " + print_guard(g) + "\n";
  for (const auto& k : s.kernels) out += "  " + print_kernel(k) + "\n";
  if (!s.writes.empty()) {
    out += "  writes";
    for (size_t i = 0; i < s.writes.size(); ++i) out += (i ? ", " : " ") + std::to_string(s.writes[i]);
    out += "\n";
  }
  if (!s.graph_off.empty()) out += "  graph off " + quote(s.graph_off) + "\n";
  if (!s.host_read.empty()) out += "  graph reads " + quote(s.host_read) + "\n";
  for (const auto& in : s.body) out += "  " + print_instr(in) + "\n";
  return out + "}\n";
}

std::string print(const Module& m) {
  std::string out;
  for (const auto& s : m.specs) out += print(s);
  return out;
}

}  // namespace trident::ir
