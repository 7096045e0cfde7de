#include <cstdio>

#include "check.h"

int main() {
  for (const auto& [name, fn] : trident_test::registry()) {
    const int before = trident_test::failures();
    fn();
    std::printf("%s %s\n", trident_test::failures() == before ? "ok" : "FAILED", name);
  }
  std::printf("%zu tests, %d failed checks\n", trident_test::registry().size(), trident_test::failures());
  return trident_test::failures() == 0 ? 0 : 1;
}
