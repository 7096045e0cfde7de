#include "runtime/gemm/cublaslt.h"

#include <dlfcn.h>

#include <array>
#include <atomic>
#include <mutex>

namespace trident::runtime::cublaslt {
namespace {

template <typename F>
bool bind(void* lib, F& slot, const char* name) {
  slot = reinterpret_cast<F>(dlsym(lib, name));
  return slot != nullptr;
}

// PyTorch's CUDA build has loaded its cuBLASLt by the time a CUDA tensor exists: take that one
// (RTLD_NOLOAD), so both use one library; load it ourselves only when nothing is loaded yet.
void* open_library() {
  for (int flags : {RTLD_NOW | RTLD_NOLOAD, RTLD_NOW | RTLD_LOCAL})
    for (const char* name : {"libcublasLt.so.13", "libcublasLt.so.12"})
      if (void* lib = dlopen(name, flags)) return lib;
  return nullptr;
}

bool load(Api& a) {
  void* lib = open_library();
  return lib && bind(lib, a.Create, "cublasLtCreate") && bind(lib, a.MatmulDescCreate, "cublasLtMatmulDescCreate") &&
         bind(lib, a.MatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute") &&
         bind(lib, a.MatrixLayoutCreate, "cublasLtMatrixLayoutCreate") &&
         bind(lib, a.MatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate") &&
         bind(lib, a.MatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy") &&
         bind(lib, a.MatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute") &&
         bind(lib, a.MatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic") &&
         bind(lib, a.Matmul, "cublasLtMatmul");
}

constexpr int kMaxDevices = 64;
std::array<std::atomic<Handle>, kMaxDevices> g_handles{};
std::mutex g_handle_mu;

}  // namespace

const Api* api() {
  static const Api* loaded = [] {
    static Api a{};
    return load(a) ? &a : nullptr;
  }();
  return loaded;
}

Handle handle(int device) {
  if (device < 0 || device >= kMaxDevices || !api()) return nullptr;
  if (Handle h = g_handles[device].load(std::memory_order_acquire)) return h;
  std::lock_guard<std::mutex> lock(g_handle_mu);
  Handle h = g_handles[device].load(std::memory_order_relaxed);
  if (!h && api()->Create(&h) != kSuccess) return nullptr;
  g_handles[device].store(h, std::memory_order_release);
  return h;
}

}  // namespace trident::runtime::cublaslt
