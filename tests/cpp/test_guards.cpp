// The cold guard evaluator (guards/explain.h), which trident.explain and the differential tests
// trust to mirror the generated decision program: Python's floor division and modulo, no_overlap's
// class conflicts, and the failure it names.
#include <cstring>
#include <vector>

#include "check.h"
#include "guards/explain.h"
#include "ir/expr.h"
#include "ir/text.h"

namespace {

using trident::guards::check_guard;
using trident::guards::first_failure;

trd_leaf tensor_leaf(int64_t size0, uint64_t ptr) {
  trd_leaf l;
  std::memset(&l, 0, sizeof l);
  l.kind = TRD_TENSOR;
  l.dtype = 6;
  l.dim = 1;
  l.sizes[0] = size0;
  l.strides[0] = 1;
  l.data_ptr = ptr;
  return l;
}

trd_leaf int_leaf(int64_t v) {
  trd_leaf l;
  std::memset(&l, 0, sizeof l);
  l.kind = TRD_INT;
  l.ival = v;
  return l;
}

trd_call call_of(const std::vector<trd_leaf>& leaves) {
  static const char kStructure[] = "Ti";  // spec_of's structure
  trd_call c{};
  c.leaves = leaves.data();
  c.nleaves = static_cast<int32_t>(leaves.size());
  c.structure = kStructure;
  c.structure_len = 2;
  c.after = -1;
  return c;
}

trident::ir::Spec spec_of(const std::string& guards) {
  return trident::ir::parse_module("spec 0 structure \"Ti\" {\n" + guards + "  return none\n}\n").specs.at(0);
}

}  // namespace

TEST(floor_division_and_modulo_round_toward_minus_infinity) {
  const auto spec = spec_of(
      "  guard expr \"(L1.ival - 7) // 2 == -4\"\n"
      "  guard expr \"(L1.ival - 7) % 2 == 1\"\n");
  const std::vector<trd_leaf> leaves = {tensor_leaf(4, 4096), int_leaf(0)};  // (0 - 7) // 2 == -4 in Python
  const trd_call c = call_of(leaves);
  CHECK(check_guard(spec.guards[0], c));
  CHECK(check_guard(spec.guards[1], c));
  CHECK(first_failure(spec, c).empty());
}

TEST(division_by_zero_is_zero_instead_of_a_crash) {
  const auto spec = spec_of("  guard expr \"L0.size[0] // L1.ival\"\n");  // holds when nonzero
  std::vector<trd_leaf> leaves = {tensor_leaf(4, 4096), int_leaf(0)};
  CHECK(!check_guard(spec.guards[0], call_of(leaves)));
  leaves[1] = int_leaf(2);
  CHECK(check_guard(spec.guards[0], call_of(leaves)));
}

TEST(the_first_failing_guard_is_named_with_the_actual_value) {
  const auto spec = spec_of("  guard L0.size[0] == 4\n  guard L1.ival >= 2\n");
  const std::vector<trd_leaf> leaves = {tensor_leaf(4, 4096), int_leaf(1)};
  const std::string why = first_failure(spec, call_of(leaves));
  CHECK(why.find("L1.ival") != std::string::npos);
  CHECK(why.find('1') != std::string::npos);
}

TEST(no_overlap_conflicts_by_class) {
  // Two written arguments (class 0) of 16 bytes: overlapping by 4 bytes fails, adjacent holds.
  const auto spec = spec_of(
      "  guard expr \"no_overlap(0, L0.data_ptr, 4 * L0.size[0], 0, L1.ival, 16)\"\n");
  std::vector<trd_leaf> leaves = {tensor_leaf(4, 4096), int_leaf(4096 + 12)};
  CHECK(!check_guard(spec.guards[0], call_of(leaves)));
  leaves[1] = int_leaf(4096 + 16);
  CHECK(check_guard(spec.guards[0], call_of(leaves)));
  // A read argument against a read argument never conflicts (class 1 with 1).
  const auto reads = spec_of("  guard expr \"no_overlap(1, L0.data_ptr, 16, 1, L1.ival, 16)\"\n");
  leaves[1] = int_leaf(4096);
  CHECK(check_guard(reads.guards[0], call_of(leaves)));
}

TEST(expressions_print_back_as_they_parse) {
  for (const char* text : {"((L0.size[0] + 1) * 2)", "(L1.ival >= (-64))", "max(L0.size[0], 3)"}) {
    const auto e = trident::ir::parse_expr(text);
    CHECK(trident::ir::print_expr(*trident::ir::parse_expr(trident::ir::print_expr(*e))) ==
          trident::ir::print_expr(*e));
  }
}
