// Liveness (planner/liveness.h): a value a call produced is released after its last use, never an
// argument or state, never a value the program returns; planning twice gives the same program.
#include <string>

#include "check.h"
#include "ir/text.h"
#include "planner/liveness.h"

TEST(a_temporary_is_released_after_its_last_use_and_the_result_is_kept) {
  auto m = trident::ir::parse_module(
      "spec 0 structure \"T\" {\n"
      "  %0 = arg 0\n"
      "  %1 = call \"aten::mul.Tensor\" (%0, %0)\n"
      "  %2 = call \"aten::add.Tensor\" (%1, %0)\n"
      "  %3 = call \"aten::relu\" (%2)\n"
      "  return %3\n}\n");
  trident::planner::insert_releases(m.specs[0]);
  const std::string once = trident::ir::print(m);
  CHECK(once.find("release %1") != std::string::npos);
  CHECK(once.find("release %2") != std::string::npos);
  CHECK(once.find("release %0") == std::string::npos);  // an argument: the frame does not own it
  CHECK(once.find("release %3") == std::string::npos);  // returned
  CHECK(once.find("release %1") > once.find("aten::add.Tensor"));
  CHECK(once.find("release %1") < once.find("aten::relu"));
  trident::planner::insert_releases(m.specs[0]);
  CHECK(trident::ir::print(m) == once);
}
