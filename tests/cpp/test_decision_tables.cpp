// The decision program's guard tables (guards/decision.h): module state extents are data handed to
// the selector, never literals of its code, sorted by start with a running maximum of their ends,
// one table of all state and one of the written state per no_overlap guard.
#include <string>

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
