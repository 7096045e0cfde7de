#include "codegen/emit_c.h"
#include "common/errors.h"

#include <cmath>
#include <map>
#include <stdexcept>

#include "abi/trident_abi.h"
#include "guards/decision.h"
#include "ir/text.h"

namespace trident::codegen {
namespace {

#include "abi_text.inc"

// Integer helpers with Python semantics (floor division and modulo round toward -inf), because the
// symbolic expressions come from Python-level shape arithmetic.
const char* kHelpers = R"C(
#include <math.h>
#include <string.h>
static inline int64_t trd_floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
static inline int64_t trd_mod(int64_t a, int64_t b) {
  int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
static inline int64_t trd_min(int64_t a, int64_t b) { return a < b ? a : b; }
/* Guard helpers never trap: a zero divisor makes the guard fail, and -1 is answered without the
   INT64_MIN / -1 overflow. */
static inline int64_t trd_gfloordiv(int64_t a, int64_t b) {
  return b == 0 ? 0 : b == -1 ? (int64_t)(0 - (uint64_t)a) : trd_floordiv(a, b);
}
static inline int64_t trd_gmod(int64_t a, int64_t b) { return b == 0 || b == -1 ? 0 : trd_mod(a, b); }
static inline int trd_divisible(int64_t a, int64_t b) { return b != 0 && (b == -1 || a % b == 0); }
static inline int trd_not_divisible(int64_t a, int64_t b) { return b != 0 && b != -1 && a % b != 0; }
static inline int64_t trd_max(int64_t a, int64_t b) { return a > b ? a : b; }
/* A double's bit pattern (float guards compare numbers the trace baked in by bits: -0.0 != 0.0). */
static inline int64_t trd_fbits(double v) { int64_t b; memcpy(&b, &v, sizeof b); return b; }
/* `|`, not `||`: no branch inside a guard (ir/expr.h: thousands of branching copies make GCC's -O2
   jump threading take seconds). */
static inline int64_t trd_disjoint(int64_t p, int64_t n, int64_t q, int64_t m) { return (p + n <= q) | (q + m <= p); }
/* no_overlap (ir/expr.h): v holds n (class, start, bytes) triples of arguments (0 written, 1 read,
   2 read and checked against written state only); A and W the module state's extents of this
   device as (start, running max of ends) pairs sorted by start: all of it, and the written part.
   Sorts v by start (insertion sort: arguments mostly arrive in address order), then sweeps. */
static int trd_extent_hit(const int64_t* t, int nt, int64_t s, int64_t e) {
  int lo = 0, hi = nt;  /* first extent starting at or after e */
  while (lo < hi) { int mid = (lo + hi) / 2; if (t[2 * mid] < e) lo = mid + 1; else hi = mid; }
  return lo > 0 && t[2 * (lo - 1) + 1] > s;
}
static int64_t trd_no_overlap(int64_t* v, int n, const int64_t* A, int na, const int64_t* W, int nw) {
  for (int i = 1; i < n; ++i) {
    int64_t c = v[3 * i], s = v[3 * i + 1], b = v[3 * i + 2];
    int j = i - 1;
    for (; j >= 0 && v[3 * j + 1] > s; --j) {
      v[3 * j + 3] = v[3 * j]; v[3 * j + 4] = v[3 * j + 1]; v[3 * j + 5] = v[3 * j + 2];
    }
    v[3 * j + 3] = c; v[3 * j + 4] = s; v[3 * j + 5] = b;
  }
  int64_t end_written = INT64_MIN, end_read = INT64_MIN;  /* furthest end so far, written / read args */
  for (int i = 0; i < n; ++i) {
    const int64_t c = v[3 * i], s = v[3 * i + 1], b = v[3 * i + 2];
    if (b <= 0) continue;  /* an empty range overlaps nothing */
    const int64_t e = s + b;
    if (c == 0) {
      if (end_written > s || end_read > s || trd_extent_hit(A, na, s, e)) return 0;
      if (e > end_written) end_written = e;
    } else {
      if ((c == 1 && end_written > s) || trd_extent_hit(W, nw, s, e)) return 0;
      if (c == 1 && e > end_read) end_read = e;
    }
  }
  return 1;
}
)C";

std::string sym_operand(const ir::Operand& o) {
  if (o.kind == ir::Operand::Kind::Sym) return "s" + std::to_string(o.i);
  return "INT64_C(" + std::to_string(o.i) + ")";
}

// A float operand: $fN's double, or a literal (nan and the infinities by their math.h names).
std::string float_operand(const ir::Operand& o) {
  if (o.kind == ir::Operand::Kind::Sym) return "s" + std::to_string(o.i);
  if (std::isnan(o.f)) return "NAN";
  if (std::isinf(o.f)) return o.f > 0 ? "INFINITY" : "(-INFINITY)";
  return "(" + ir::print_float(o.f) + ")";
}

class SpecEmitter {
 public:
  SpecEmitter(const ir::Spec& s, std::vector<std::string>& sites, std::vector<std::string>& kernels)
      : s_(s), sites_(sites) {
    // Spec-local kernel ids become indices into the module-wide kernel table.
    for (const auto& k : s.kernels) {
      ir::Kernel g = k;
      g.id = static_cast<int32_t>(kernels.size());
      kernel_index_[k.id] = g.id;
      kernels.push_back(ir::print_kernel(g));
    }
  }

  std::string body;
  int32_t nslots = 0;
  int32_t nout = 0;
  std::string output_tree;

  void run() {
    for (const auto& in : s_.body) instr(in);
  }

 private:
  const ir::Spec& s_;
  std::vector<std::string>& sites_;  // the spec's call and launch sites, host IR text
  std::map<int64_t, ir::Operand> loc_;   // %id -> arg(K) / state(K) / %slot
  std::map<int64_t, int32_t> arg_leaf_;  // %id of an argument -> leaf index
  std::map<int64_t, int32_t> kernel_index_;  // spec-local kernel id -> module-wide index

  void line(const std::string& t) { body += "  " + t + "\n"; }

  // `kind, index` of %id's tensor as rt->item and rt->dim take it (trident_abi.h).
  std::string location(int64_t id) const {
    const ir::Operand& loc = loc_.at(id);
    const int kind = loc.kind == ir::Operand::Kind::ArgRef ? 0 : loc.kind == ir::Operand::Kind::StateRef ? 1 : 2;
    return std::to_string(kind) + ", " + std::to_string(loc.i);
  }

  // Rewrite an operand tree into site form: tensors by location, symbols by dyn position.
  ir::Operand resolve(const ir::Operand& o, std::vector<std::string>& dyn) {
    using K = ir::Operand::Kind;
    if (o.kind == K::Value) {
      auto it = loc_.find(o.i);
      TRD_INTERNAL_ASSERT(it != loc_.end(), "codegen: %" + std::to_string(o.i) + " has no location");
      return it->second;
    }
    if (o.kind == K::Sym) {
      // A float symbol travels as its bit pattern; the site's operand stays marked float ($fj).
      bool f = o.j == 1;
      dyn.push_back(f ? "trd_fbits(s" + std::to_string(o.i) + ")" : "s" + std::to_string(o.i));
      auto pos = static_cast<int64_t>(dyn.size() - 1);
      return f ? ir::Operand::fsym(pos) : ir::Operand::sym(pos);
    }
    ir::Operand r = o;
    for (auto& it : r.items) it = resolve(it, dyn);
    return r;
  }

  std::string dyn_array(const std::vector<std::string>& dyn, const char* name, const char* type) {
    if (dyn.empty()) return "";
    std::string s = std::string(type) + " " + name + "[" + std::to_string(dyn.size()) + "] = {";
    for (size_t k = 0; k < dyn.size(); ++k) s += (k ? ", " : "") + dyn[k];
    return s + "}; ";
  }

  // Python's float arithmetic, raising where Python raises (rt->fail's "Kind: message" form,
  // trident_abi.h): the program a call runs must not compute an inf or a NaN that eager never
  // returns.
  void float_op(const ir::Instr& in, const std::string& r) {
    using F = ir::Instr::FloatOp;
    std::string a = in.fop == F::FromInt ? sym_operand(in.operands[0]) : float_operand(in.operands[0]);
    std::string b = in.operands.size() > 1 ? float_operand(in.operands[1]) : "";
    auto raise = [&](const std::string& cond, const char* message) {
      line("if (" + cond + ") return rt->fail(f, \"" + message + "\");");
    };
    std::string e;
    switch (in.fop) {
      case F::Add: e = a + " + " + b; break;
      case F::Sub: e = a + " - " + b; break;
      case F::Mul: e = a + " * " + b; break;
      case F::Div:
        raise(b + " == 0.0", "ZeroDivisionError: float division by zero");
        e = a + " / " + b;
        break;
      case F::Pow:
        raise(a + " == 0.0 && " + b + " < 0.0", "ZeroDivisionError: zero to a negative power");
        raise(a + " < 0.0 && isfinite(" + b + ") && " + b + " != floor(" + b + ")",
              "ValueError: a negative number to a fractional power is complex");
        e = "pow(" + a + ", " + b + ")";
        break;
      case F::Neg: e = "-" + a; break;
      case F::Sqrt:
        raise(a + " < 0.0", "ValueError: math domain error");
        e = "sqrt(" + a + ")";
        break;
      case F::FromInt: e = "(double)" + a; break;
    }
    line("const double " + r + " = " + e + ";");
    // Of + - * / **, only ** raises on overflow in Python; the others give inf, as C does.
    if (in.fop == F::Pow)
      raise("isinf(" + r + ") && isfinite(" + a + ") && isfinite(" + b + ")",
            "OverflowError: (34, 'Numerical result out of range')");
  }

  int32_t add_site(const ir::Instr& site) {
    sites_.push_back(ir::print_instr(site));
    return static_cast<int32_t>(sites_.size() - 1);
  }

  void instr(const ir::Instr& in) {
    using K = ir::Instr::Kind;
    std::string r = in.results.empty() ? "" : "s" + std::to_string(in.results[0]);
    switch (in.kind) {
      case K::Arg: {
        ir::Operand o;
        o.kind = ir::Operand::Kind::ArgRef;
        o.i = in.a;
        loc_[in.results[0]] = o;
        arg_leaf_[in.results[0]] = static_cast<int32_t>(in.a);
        break;
      }
      case K::State: {
        ir::Operand o;
        o.kind = ir::Operand::Kind::StateRef;
        o.i = in.a;
        loc_[in.results[0]] = o;
        break;
      }
      case K::SymLeaf: line("const int64_t " + r + " = L[" + std::to_string(in.a) + "].ival;"); break;
      case K::SymSize:
      case K::SymStride:
        if (arg_leaf_.count(in.a)) {  // an argument's: from its leaf
          line("const int64_t " + r + " = L[" + std::to_string(arg_leaf_.at(in.a)) + "]." +
               (in.kind == K::SymSize ? "sizes[" : "strides[") + std::to_string(in.b) + "];");
        } else {  // a result's (a data-dependent size: nonzero, masked_select)
          line("int64_t " + r + "; if (rt->dim(f, " + location(in.a) + ", " + (in.kind == K::SymSize ? "0" : "1") +
               ", " + std::to_string(in.b) + ", &" + r + ")) return 1;");
        }
        break;
      case K::Item:
        if (in.b == 1) {
          line("double " + r + "; { int64_t b; if (rt->item(f, " + location(in.a) + ", 1, &b)) return 1; memcpy(&" + r +
               ", &b, sizeof b); }");
        } else {
          line("int64_t " + r + "; if (rt->item(f, " + location(in.a) + ", 0, &" + r + ")) return 1;");
        }
        break;
      case K::Check:
        line("if (!" + sym_operand(in.operands[0]) + ") return rt->fail(f, " + (in.b == 1 ? "TRD_BRANCH_MISS " : "") +
             ir::quote(in.op) + ");");
        break;
      case K::SymBin: {
        std::string a = sym_operand(in.operands[0]), b = sym_operand(in.operands[1]);
        using B = ir::Instr::BinOp;
        if (in.binop == B::FloorDiv || in.binop == B::Mod || in.binop == B::CeilDiv)
          line("if (" + b + " == 0) return rt->fail(f, \"symbolic size: division by zero\");");
        std::string e;
        switch (in.binop) {
          case B::Add: e = a + " + " + b; break;
          case B::Sub: e = a + " - " + b; break;
          case B::Mul: e = a + " * " + b; break;
          case B::FloorDiv: e = "trd_floordiv(" + a + ", " + b + ")"; break;
          case B::Mod: e = "trd_mod(" + a + ", " + b + ")"; break;
          case B::Min: e = "trd_min(" + a + ", " + b + ")"; break;
          case B::Max: e = "trd_max(" + a + ", " + b + ")"; break;
          case B::CeilDiv: e = "-trd_floordiv(-" + a + ", " + b + ")"; break;
          case B::Eq: e = "(int64_t)(" + a + " == " + b + ")"; break;
          case B::Ne: e = "(int64_t)(" + a + " != " + b + ")"; break;
          case B::Lt: e = "(int64_t)(" + a + " < " + b + ")"; break;
          case B::Le: e = "(int64_t)(" + a + " <= " + b + ")"; break;
          case B::Gt: e = "(int64_t)(" + a + " > " + b + ")"; break;
          case B::Ge: e = "(int64_t)(" + a + " >= " + b + ")"; break;
        }
        line("const int64_t " + r + " = " + e + ";");
        break;
      }
      case K::FloatLeaf: line("const double " + r + " = L[" + std::to_string(in.a) + "].fval;"); break;
      case K::FloatOp: float_op(in, r); break;
      case K::Call:
      case K::Launch: {
        ir::Instr site = in;
        std::vector<std::string> dyn, grid;
        for (auto& o : site.operands) o = resolve(o, dyn);
        site.grid.clear();
        for (const auto& g : in.grid) grid.push_back("(uint32_t)" + sym_operand(g));
        site.results.clear();
        for (int64_t v : in.results) {
          loc_[v] = ir::Operand::value(nslots);
          site.results.push_back(nslots++);
        }
        if (in.kind == K::Launch) {
          site.a = kernel_index_.at(in.a);
          for (int k = 0; k < 3; ++k) site.grid.push_back(ir::Operand::integer(k));  // computed in C
        }
        int32_t id = add_site(site);
        std::string dyn_decl = dyn_array(dyn, "d", "const int64_t");
        std::string d = dyn.empty() ? "NULL" : "d";
        if (in.kind == K::Call) {
          line("{ " + dyn_decl + "if (rt->call(f, " + std::to_string(id) + ", " + d + ")) return 1; }");
        } else {
          line("{ " + dyn_array(grid, "g", "const uint32_t") + dyn_decl + "if (rt->launch(f, " +
               std::to_string(id) + ", g, " + d + ", NULL)) return 1; }");
        }
        break;
      }
      case K::Release:
        line("rt->release(f, " + std::to_string(loc_.at(in.a).i) + ");");
        break;
      case K::Return: {
        std::vector<std::string> outs;
        ir::Operand tree = resolve(in.operands[0], outs);
        for (size_t k = 0; k < outs.size(); ++k) line("out[" + std::to_string(k) + "] = " + outs[k] + ";");
        nout = static_cast<int32_t>(outs.size());
        output_tree = ir::print_operand(tree);
        line("return 0;");
        break;
      }
    }
  }
};

}  // namespace

const char* abi_header_text() { return kTridentAbiText; }

EmittedSpec emit_spec(const ir::Spec& s) {
  // Plain string building throughout: no iostreams in the core (see toolchain.cpp).
  EmittedSpec out;
  SpecEmitter e(s, out.sites, out.kernels);
  e.run();
  out.output = e.output_tree;
  std::string& src = out.source;
  src = "/* One specialization of a Specialization Cache Module, generated by torch-trident. Do not edit. */\n";
  src += std::string(kTridentAbiText) + kHelpers + "\n";
  src += "static int trd_run(const trd_rt* rt, trd_frame* f, const trd_leaf* L, int64_t* out) {\n"
         "  (void)L; (void)out;\n" + e.body + "}\n\n";
  src += "static const trd_spec trd_the_spec = {TRD_ABI_VERSION, trd_run, " + std::to_string(e.nslots) + ", " +
         std::to_string(e.nout) + ", " + std::to_string(out.sites.size()) + ", " + std::to_string(out.kernels.size()) +
         "};\n"
         "__attribute__((visibility(\"default\"))) const trd_spec* " TRD_SPEC_ENTRY "(void) {\n"
         "  return &trd_the_spec;\n}\n";
  return out;
}

EmittedSelector emit_selector(const std::vector<ir::Spec>& specs) {
  for (size_t k = 0; k < specs.size(); ++k)
    TRD_INTERNAL_ASSERT(specs[k].id == static_cast<int32_t>(k),
                        "codegen: spec ids must be 0..n-1 in order, found " + std::to_string(specs[k].id));
  guards::EmittedSelect select = guards::emit_select(specs);
  EmittedSelector out;
  out.tables = std::move(select.tables);
  out.source = "/* The decision program of a Specialization Cache Module, generated by torch-trident. Do not edit. */\n";
  out.source += std::string(kTridentAbiText) + kHelpers + "\n";
  out.source += select.source + "\n";
  // nspecs: the ids the code names, not the module's count, so that the code stays the same as
  // specs whose ids are table data are added (decision.h: pick tables).
  out.source += "static const trd_selector trd_the_selector = {TRD_ABI_VERSION, " + std::to_string(select.ids_named) +
                ", " + std::to_string(out.tables.tables.size()) + ", trd_select};\n" +
                "__attribute__((visibility(\"default\"))) const trd_selector* " TRD_SELECTOR_ENTRY "(void) {\n"
                "  return &trd_the_selector;\n}\n";
  return out;
}

EmittedModule emit_module(const ir::Module& m) {
  EmittedModule out;
  out.selector = emit_selector(m.specs);
  for (const auto& s : m.specs) out.specs.push_back(emit_spec(s));
  return out;
}

}  // namespace trident::codegen
