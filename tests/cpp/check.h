// A minimal test harness for the C++ unit tests (tests/cpp): TEST(name) registers a test, CHECK
// records a failure with its file and line and goes on. main() (main.cpp) runs every test and exits
// nonzero when any check failed; tests/python/test_cpp_units.py runs it in CI.
#pragma once

#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace trident_test {

inline int& failures() {
  static int n = 0;
  return n;
}
inline std::vector<std::pair<const char*, void (*)()>>& registry() {
  static std::vector<std::pair<const char*, void (*)()>> r;
  return r;
}
struct Registrar {
  Registrar(const char* name, void (*fn)()) { registry().emplace_back(name, fn); }
};

}  // namespace trident_test

#define CHECK(cond)                                                                        \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);        \
      ++trident_test::failures();                                                          \
    }                                                                                      \
  } while (0)

#define TEST(name)                                                    \
  static void name();                                                 \
  static trident_test::Registrar registrar_##name(#name, name);       \
  static void name()
