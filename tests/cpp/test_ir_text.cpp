// The host IR's text (ir/text.h) over the guard vocabulary (ir/guard_fields.def): every field
// parses and prints back in its shape, a field read in the wrong shape is a parse error naming
// what was expected, and the verifier bounds a dimension.
#include <string>
#include <utility>
#include <vector>

#include "check.h"
#include "ir/ir.h"
#include "ir/text.h"
#include "ir/verifier.h"

namespace {

using trident::ir::Field;

std::string field_text(Field::Kind k, int leaf, int dim) {
  std::string s = leaf >= 0 ? "L" + std::to_string(leaf) + "." : "";
  s += trident::ir::field_name(k);
  if (dim >= 0) s += "[" + std::to_string(dim) + "]";
  return s;
}

std::string module_with_guard(const std::string& guard) {
  return "spec 0 structure \"Ti\" {\n  guard " + guard + "\n  return none\n}\n";
}

bool parse_fails(const std::string& text, const char* says) {
  try {
    trident::ir::parse_module(text);
  } catch (const trident::ir::ParseError& e) {
    return std::string(e.what()).find(says) != std::string::npos;
  }
  return false;
}

}  // namespace

TEST(every_guard_field_parses_and_prints_back_in_its_shape) {
  CHECK(trident::ir::kNumFieldKinds == 15);
  for (int k = 0; k < trident::ir::kNumFieldKinds; ++k) {
    const auto kind = static_cast<Field::Kind>(k);
    const Field::Shape shape = trident::ir::field_shape(kind);
    const std::string field = field_text(kind, shape == Field::Shape::CALL ? -1 : 1,
                                         shape == Field::Shape::DIM ? 2 : -1);
    const std::string rhs = kind == Field::Kind::FloatValue ? "0.5" : "3";
    const std::string text = module_with_guard(field + " == " + rhs);
    const auto m = trident::ir::parse_module(text);
    CHECK(m.specs.at(0).guards.at(0).lhs.kind == kind);
    CHECK(trident::ir::print(m) == text);
  }
}

TEST(a_field_read_in_the_wrong_shape_is_a_parse_error) {
  CHECK(parse_fails(module_with_guard("L0.grad_mode == 1"), "a global field without L<n>."));
  CHECK(parse_fails(module_with_guard("dtype == 6"), "L<n>. before a leaf field"));
  CHECK(parse_fails(module_with_guard("L0.size == 6"), "["));
  CHECK(parse_fails(module_with_guard("L0.colour == 6"), "a guard field name"));
}

TEST(the_verifier_bounds_a_dimension) {
  auto m = trident::ir::parse_module(module_with_guard("L0.stride[8] == 1"));
  bool refused = false;
  try {
    trident::ir::verify(m);
  } catch (const std::exception& e) {
    refused = std::string(e.what()).find("dimension 8") != std::string::npos;
  }
  CHECK(refused);
}

TEST(a_tuple_class_output_parses_prints_back_and_verifies) {
  // a namedtuple or structseq result (python/trident/lowering/output_trees.py): object(K) seq (items)
  for (const std::string tree : {"object(3) seq (%1, (%1, none), 2)", "object(0) seq (%1,)"}) {
    const std::string text = "spec 0 structure \"T\" {\n  %1 = arg 0\n  return " + tree + "\n}\n";
    const auto m = trident::ir::parse_module(text);
    CHECK(trident::ir::print(m) == text);
    trident::ir::verify(m);
  }
}

TEST(a_kernel_with_tensor_descriptor_parameters_parses_prints_back_and_verifies) {
  // tmadesc parameters (runtime/launch/tma_args.h) with one tma clause each, in order
  const std::string decl = "kernel 0 \"tile\" \"k.cubin\" \"tmadesc,i32,i32,i64,i64,tmadesc,i32,i64,i32\" warps 4 "
                           "ctas 1 shared 0 gscratch 0 1 pscratch 0 1 pdl 0 coop 0 tma 2 2 6 0 0 64 32 tma 1 4 7 0 1 128";
  const std::string text = "spec 0 structure \"T\" {\n  " + decl + "\n  return none\n}\n";
  const auto m = trident::ir::parse_module(text);
  const auto& k = m.specs.at(0).kernels.at(0);
  CHECK(k.tma.size() == 2);
  CHECK(k.tma[0].swizzle == 2 && k.tma[0].elem_size == 2 && k.tma[0].elem_type == 6 && !k.tma[0].nan_padding);
  CHECK((k.tma[0].block == std::vector<int64_t>{64, 32}));
  CHECK(k.tma[1].nan_padding && (k.tma[1].block == std::vector<int64_t>{128}));
  CHECK(trident::ir::print(m) == text);
  trident::ir::verify(m);
  for (const auto& [bad, says] : std::vector<std::pair<std::string, std::string>>{
           {"tma 2 2 6 0 0 64 32", "2 tmadesc parameters and 1 tma clauses"},
           {"tma 2 2 6 0 0 64 32 tma 1 4 7 0 1 512", "a tma block dimension of 512"}}) {
    std::string broken = text;
    broken.replace(broken.find("tma 2 2 6"), std::string("tma 2 2 6 0 0 64 32 tma 1 4 7 0 1 128").size(), bad);
    bool refused = false;
    try {
      trident::ir::verify(trident::ir::parse_module(broken));
    } catch (const std::exception& e) {
      refused = std::string(e.what()).find(says) != std::string::npos;
    }
    CHECK(refused);
  }
}
