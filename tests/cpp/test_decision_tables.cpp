// The decision program's guard tables (guards/decision.h): module state extents are data handed to
// the selector, never literals of its code, sorted by start with a running maximum of their ends,
// one table of all state and one of the written state per no_overlap guard.
#include <string>
#include <vector>

#include "check.h"
#include "guards/decision.h"
#include "ir/text.h"

namespace {

// The decision program of one spec with one guard expression.
trident::guards::EmittedSelect select_for(const char* structure, const char* guard) {
  const auto m = trident::ir::parse_module(std::string("spec 0 structure \"") + structure + "\" {\n  guard expr \"" +
                                           guard + "\"\n  return none\n}\n");
  return trident::guards::emit_select(m.specs);
}

}  // namespace

TEST(state_extents_become_sorted_tables_and_stay_out_of_the_code) {
  // class 3 written state at 5000 (8 bytes), class 4 read state at 1000 (64) and 1032 (8)
  const auto select = select_for("T", "no_overlap(0, L0.data_ptr, 16, 4, 1032, 8, 3, 5000, 8, 4, 1000, 64)");
  CHECK(select.tables.tables.size() == 2);
  const std::vector<int64_t> all = {1000, 1064, 1032, 1064, 5000, 5008};  // [start, running end]
  const std::vector<int64_t> written = {5000, 5008};
  CHECK(select.tables.tables.at(0) == all);
  CHECK(select.tables.tables.at(1) == written);
  CHECK(select.source.find("c->tables[0], 3, c->tables[1], 1)") != std::string::npos);
  for (const char* address : {"1000", "1032", "5000"}) CHECK(select.source.find(address) == std::string::npos);
}

TEST(guards_over_arguments_only_need_no_table) {
  const auto select = select_for("TT", "no_overlap(0, L0.data_ptr, 16, 1, L1.data_ptr, 16)");
  CHECK(select.tables.tables.empty());
  CHECK(select.source.find("trd_no_overlap(") != std::string::npos);
}

namespace {

// The decision program of one spec per value of an int argument.
trident::guards::EmittedSelect select_per_value(const std::vector<int64_t>& values) {
  std::string text;
  for (size_t k = 0; k < values.size(); ++k)
    text += "spec " + std::to_string(k) + " structure \"i\" {\n  guard L0.kind == 2\n  guard L0.ival == " +
            std::to_string(values[k]) + "\n  return none\n}\n";
  return trident::guards::emit_select(trident::ir::parse_module(text).specs);
}

}  // namespace

TEST(one_spec_per_value_is_a_pick_table_and_the_code_does_not_change_as_specs_are_added) {
  const auto five = select_per_value({70, -3, 9000001, 12, 5});
  CHECK(five.tables.tables.size() == 1);
  const std::vector<int64_t> pick = {5, -3, 1, 5, 4, 12, 3, 70, 0, 9000001, 2};  // [n, value, spec]...
  CHECK(five.tables.tables.at(0) == pick);
  CHECK(five.source.find("trd_pick(") != std::string::npos);
  for (const char* value : {"70", "9000001", "12"}) CHECK(five.source.find(value) == std::string::npos);
  CHECK(five.ids_named == 0);
  const auto six = select_per_value({70, -3, 9000001, 12, 5, 44});
  CHECK(six.source == five.source);
  CHECK(six.tables.tables.at(0).at(0) == 6);
}

TEST(two_values_are_already_the_table_code_of_any_more) {
  const auto two = select_per_value({1, 2});
  CHECK(two.tables.tables.size() == 1);
  CHECK(two.source == select_per_value({70, -3, 9000001, 12, 5}).source);
  CHECK(two.ids_named == 0);
}

TEST(a_value_shared_by_two_specs_stays_a_switch) {
  const auto shared = select_per_value({1, 2, 2});
  CHECK(shared.tables.tables.empty());
  CHECK(shared.source.find("switch") != std::string::npos);
  CHECK(shared.ids_named == 3);
}
