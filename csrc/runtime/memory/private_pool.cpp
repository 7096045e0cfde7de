#include "runtime/memory/private_pool.h"

#include <memory>

namespace trident::runtime {
namespace {
// Installed once at import, before any module runs; read on the (GIL-serialized) hot path.
std::unique_ptr<PrivatePoolApi>& slot() {
  static auto* api = new std::unique_ptr<PrivatePoolApi>();  // never destroyed (exit order)
  return *api;
}
}  // namespace

void set_private_pool_api(PrivatePoolApi api) { slot() = std::make_unique<PrivatePoolApi>(std::move(api)); }

const PrivatePoolApi* private_pool_api() { return slot().get(); }

}  // namespace trident::runtime
