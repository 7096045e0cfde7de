// The runtime's on/off environment switches. python/trident/config.py documents each; callers read
// one once.
#pragma once

#include <cstdlib>
#include <cstring>

namespace trident::runtime {

// On unless set to "0" (TRIDENT_CUBLASLT_REPLAY, TRIDENT_ATEN_REPLAY).
inline bool env_switch_on(const char* name) {
  const char* v = std::getenv(name);
  return !(v && std::strcmp(v, "0") == 0);
}

// Off unless set to "1" (TRIDENT_LINEAR_ND).
inline bool env_switch_set(const char* name) {
  const char* v = std::getenv(name);
  return v && std::strcmp(v, "1") == 0;
}

}  // namespace trident::runtime
