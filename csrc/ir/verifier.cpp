// Rules: values are defined once and before use; `arg` and guards name leaves that the structure
// has; sizes and strides are read only from arguments (the only tensors whose metadata the guards
// fix); a released value is not used again; the body ends with exactly one return.
#include "ir/verifier.h"

#include <cstdlib>
#include <set>

#include "abi/trident_abi.h"
#include "ir/expr.h"
#include "ir/text.h"

namespace trident::ir {
namespace {

struct Checker {
  const Spec& s;
  int nleaves;
  std::set<int64_t> values, syms, fsyms, released, args, kernel_ids;

  [[noreturn]] void fail(const std::string& what, const Instr* in = nullptr) const {
    std::string where = "spec " + std::to_string(s.id);
    if (in) where += ", instruction '" + print_instr(*in) + "'";
    throw VerifyError("host IR verifier: " + where + ": " + what);
  }

  void use(const Operand& o, const Instr& in) {
    using K = Operand::Kind;
    if (o.kind == K::Value) {
      if (!values.count(o.i)) fail("%" + std::to_string(o.i) + " used before definition", &in);
      if (released.count(o.i)) fail("%" + std::to_string(o.i) + " used after release", &in);
    } else if (o.kind == K::Sym) {
      bool f = o.j == 1;
      if (!(f ? fsyms : syms).count(o.i)) {
        std::string name = (f ? "$f" : "$") + std::to_string(o.i);
        fail(name + ((f ? syms : fsyms).count(o.i) ? " names a symbol of the other type" : " used before definition"), &in);
      }
    } else if ((o.kind == K::Dict || (o.kind == K::Object && o.j != 2) || (o.kind == K::Update && o.j != 1)) &&
               o.keys.size() != o.items.size()) {
      fail("dict, object or update with mismatched names and items", &in);
    } else if (!o.int_keys.empty() && (o.kind == K::Object || o.int_keys.size() > o.keys.size())) {
      fail("int keys are dict keys only", &in);
    } else if ((o.kind == K::Node || o.kind == K::PyRef || o.kind == K::Object || o.kind == K::Update ||
                o.kind == K::Effects) && in.kind != Instr::Kind::Return) {
      fail("node, pyref, object, update and effects are output-tree operands only", &in);
    } else if (o.kind == K::Ptr) {
      if (in.kind != Instr::Kind::Launch) fail("ptr(...) is a launch operand only", &in);
      if (o.items.size() != 2 || o.items[0].kind != K::Value ||
          (o.items[1].kind != K::Int && (o.items[1].kind != K::Sym || o.items[1].j == 1)))
        fail("ptr(...) takes a tensor %N and a byte offset (an int or $N)", &in);
    }
    for (const auto& it : o.items) use(it, in);
  }

  void define(std::set<int64_t>& into, int64_t id, const Instr& in, char sigil) {
    // ints and floats share one id space
    bool other = &into == &syms ? fsyms.count(id) > 0 : &into == &fsyms ? syms.count(id) > 0 : false;
    if (other || !into.insert(id).second) fail(std::string(1, sigil) + std::to_string(id) + " defined twice", &in);
  }

  // An integer operand ($N or an int literal): sizes, grids, offsets, int arithmetic.
  void int_operand(const Operand& o, const Instr& in, const char* what) {
    if (o.kind != Operand::Kind::Int && !(o.kind == Operand::Kind::Sym && o.j != 1))
      fail(std::string(what) + " must be $N or an int", &in);
    use(o, in);
  }

  void field(const Field& f) {
    if (f.leaf >= 0) leaf(f.leaf, nullptr);
    if (field_shape(f.kind) == Field::Shape::DIM && (f.index < 0 || f.index >= TRD_MAX_DIM))
      fail("dimension " + std::to_string(f.index) + " outside 0.." + std::to_string(TRD_MAX_DIM - 1));
  }

  void leaf(int64_t k, const Instr* in) {
    if (k < 0 || k >= nleaves)
      fail("leaf " + std::to_string(k) + " out of range: structure has " + std::to_string(nleaves), in);
  }

  void run() {
    for (const auto& k : s.kernels) {
      if (!kernel_ids.insert(k.id).second) fail("kernel " + std::to_string(k.id) + " declared twice");
      size_t descs = 0;
      for (size_t b = 0; (b = k.params.find("tmadesc", b)) != std::string::npos; b += 7) ++descs;
      if (descs != k.tma.size())
        fail("kernel " + std::to_string(k.id) + " has " + std::to_string(descs) + " tmadesc parameters and " +
             std::to_string(k.tma.size()) + " tma clauses");
      for (const auto& t : k.tma) {
        if (t.block.empty() || t.block.size() > 5)
          fail("kernel " + std::to_string(k.id) + ": a tma block of rank " + std::to_string(t.block.size()) +
               " (1 to 5)");
        for (int64_t b : t.block)
          if (b <= 0 || b > 256) fail("kernel " + std::to_string(k.id) + ": a tma block dimension of " + std::to_string(b));
        if (t.elem_size <= 0 || t.elem_size > 8) fail("kernel " + std::to_string(k.id) + ": a tma element size of " + std::to_string(t.elem_size));
      }
    }
    for (const auto& g : s.guards) {
      if (g.expr) {
        std::vector<Field> fields;
        expr_fields(*g.expr, fields);
        for (const auto& f : fields) field(f);
        continue;
      }
      field(g.lhs);
      if (g.rhs_is_field) field(g.rhs_field);
    }
    for (size_t i = 0; i < s.writes.size(); ++i) {
      leaf(s.writes[i], nullptr);
      if (i > 0 && s.writes[i] <= s.writes[i - 1]) fail("writes: leaves must be listed once, in ascending order");
    }
    bool returned = false;
    for (const auto& in : s.body) {
      using K = Instr::Kind;
      if (returned) fail("instruction after return", &in);
      switch (in.kind) {
        case K::Arg: leaf(in.a, &in); define(values, in.results.at(0), in, '%'); args.insert(in.results[0]); break;
        case K::State: define(values, in.results.at(0), in, '%'); break;
        case K::SymLeaf: leaf(in.a, &in); define(syms, in.results.at(0), in, '$'); break;
        case K::SymSize:
        case K::SymStride:
        case K::Item:
          if (!values.count(in.a) || released.count(in.a))
            fail("reads %" + std::to_string(in.a) + ", which is not a live tensor value", &in);
          define(in.kind == K::Item && in.b == 1 ? fsyms : syms, in.results.at(0), in, '$');
          break;
        case K::Check:
          if (in.operands.size() != 1) fail("check takes one condition", &in);
          int_operand(in.operands[0], in, "a check's condition");
          break;
        case K::SymBin:
          if (in.operands.size() != 2) fail("symbolic operator needs two operands", &in);
          for (const auto& o : in.operands) int_operand(o, in, "symbolic operand");
          define(syms, in.results.at(0), in, '$');
          break;
        case K::FloatLeaf: leaf(in.a, &in); define(fsyms, in.results.at(0), in, '$'); break;
        case K::FloatOp:
          if (static_cast<int>(in.operands.size()) != float_op_arity(in.fop))
            fail(std::string(float_op_name(in.fop)) + " takes " + std::to_string(float_op_arity(in.fop)) + " operands", &in);
          for (const auto& o : in.operands) {
            if (in.fop == Instr::FloatOp::FromInt) {
              int_operand(o, in, "itof's operand");
            } else {
              if (o.kind != Operand::Kind::Float && !o.is_fsym()) fail("float operand must be $fN or a float", &in);
              use(o, in);
            }
          }
          define(fsyms, in.results.at(0), in, '$');
          break;
        case K::Call:
        case K::Launch:
          if (in.kind == K::Call && in.op.find("::") == std::string::npos) fail("operator name without namespace", &in);
          if (in.kind == K::Launch && in.grid.size() != 3) fail("launch grid needs three dimensions", &in);
          if (in.kind == K::Launch && !kernel_ids.count(in.a)) fail("launch of undeclared kernel " + std::to_string(in.a), &in);
          for (const auto& o : in.grid) int_operand(o, in, "a grid dimension");
          for (const auto& o : in.operands) use(o, in);
          for (int64_t r : in.results) define(values, r, in, '%');
          break;
        case K::Release:
          if (!values.count(in.a) || !released.insert(in.a).second) fail("release of an undefined or released value", &in);
          break;
        case K::Return:
          if (in.operands.size() != 1) fail("return takes one output tree", &in);
          use(in.operands[0], in);
          returned = true;
          break;
      }
    }
    if (!returned) fail("body does not end with return");
  }
};

}  // namespace

int count_structure_leaves(const std::string& st) {
  int n = 0;
  for (size_t k = 0; k < st.size(); ++k) {
    char c = st[k];
    // A name follows ';' (keyword) and '{' or ',' (dict key) unless the dict is empty: skip to '='.
    if (c == ';' || ((c == '{' || c == ',') && k + 1 < st.size() && st[k + 1] != '}')) {
      while (k < st.size() && st[k] != '=') ++k;
      continue;
    }
    // A str constant of an object (s<len>:<bytes>): its bytes are not codes.
    if (c == 's') {
      size_t colon = st.find(':', k);
      if (colon == std::string::npos) break;
      k = colon + std::strtoull(st.c_str() + k + 1, nullptr, 10);
      continue;
    }
    if (c == 'T' || c == 'i' || c == 'f' || c == 'b' || c == 'n') ++n;
  }
  return n;
}

void verify(const Spec& s) {
  Checker c{s, count_structure_leaves(s.structure), {}, {}, {}, {}, {}, {}};
  c.run();
}

void verify(const Module& m) {
  std::set<int32_t> ids;
  for (const auto& s : m.specs) {
    if (!ids.insert(s.id).second) throw VerifyError("host IR verifier: spec id " + std::to_string(s.id) + " repeated");
    verify(s);
  }
}

}  // namespace trident::ir
