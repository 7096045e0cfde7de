// The runtime's on/off environment switches (TRIDENT_CUBLASLT_REPLAY, TRIDENT_ATEN_REPLAY,
// TRIDENT_LINEAR_ND): on
// unless set to "0". python/trident/config.py documents each; callers read one once.
#pragma once

#include <cstdlib>
#include <cstring>

namespace trident::runtime {

inline bool env_switch_on(const char* name) {
  const char* v = std::getenv(name);
  return !(v && std::strcmp(v, "0") == 0);
}

}  // namespace trident::runtime
