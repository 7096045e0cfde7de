// The runtime's environment switches and byte counts. python/trident/config.py documents each (and
// rejects a malformed value at import); callers read one once.
#pragma once

#include <cstdint>
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

// A decimal count of bytes, 0 or more (TRIDENT_KEPT_BYTES, TRIDENT_GRAPH_BYTES); `fallback` when
// unset, empty or malformed.
inline int64_t env_bytes(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  return *end == '\0' && n >= 0 ? static_cast<int64_t>(n) : fallback;
}

}  // namespace trident::runtime
