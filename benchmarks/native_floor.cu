// Native floor: host cost of launching an empty kernel from C++ through the CUDA driver API.
//
// Loads an empty kernel from PTX with cuModuleLoadData (as Triton loads its cubins), then times
// loops of cuLaunchKernel on the default stream with a stream sync every 100 launches (the same
// method as the Python side). Prints one number: the median µs per launch over the repeats.
//
// Build: nvcc -O2 -arch=sm_90 native_floor.cu -o native_floor -lcuda
// Usage: native_floor [launches_per_repeat=20000] [repeats=7]
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

// PTX for sm_50 is JIT-compiled by the driver for whatever GPU is present.
static const char kPtx[] =
    ".version 6.0\n"
    ".target sm_50\n"
    ".address_size 64\n"
    ".visible .entry empty_kernel()\n"
    "{\n"
    "  ret;\n"
    "}\n";

#define CHECK(call)                                                             \
  do {                                                                          \
    CUresult r_ = (call);                                                       \
    if (r_ != CUDA_SUCCESS) {                                                   \
      const char* msg_ = "unknown";                                             \
      cuGetErrorString(r_, &msg_);                                              \
      std::fprintf(stderr, "%s failed: %s (%d)\n", #call, msg_, static_cast<int>(r_)); \
      return 1;                                                                 \
    }                                                                           \
  } while (0)

int main(int argc, char** argv) {
  const int launches = argc > 1 ? std::atoi(argv[1]) : 20000;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 7;
  const int sync_every = 100;

  CUdevice dev;
  CUcontext ctx;
  CUmodule mod;
  CUfunction fn;
  CUstream stream = nullptr;  // the legacy default stream, as eager PyTorch uses
  CHECK(cuInit(0));
  CHECK(cuDeviceGet(&dev, 0));
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  CHECK(cuModuleLoadData(&mod, kPtx));
  CHECK(cuModuleGetFunction(&fn, mod, "empty_kernel"));

  auto launch_loop = [&](int n) -> CUresult {
    for (int i = 1; i <= n; ++i) {
      CUresult r = cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr);
      if (r != CUDA_SUCCESS) return r;
      if (i % sync_every == 0 && (r = cuStreamSynchronize(stream)) != CUDA_SUCCESS) return r;
    }
    return cuStreamSynchronize(stream);
  };

  CHECK(launch_loop(2000));  // warm-up
  std::vector<double> us;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    CHECK(launch_loop(launches));
    auto t1 = std::chrono::steady_clock::now();
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / launches);
  }
  std::sort(us.begin(), us.end());
  std::printf("%.3f\n", us[us.size() / 2]);
  CHECK(cuModuleUnload(mod));
  CHECK(cuDevicePrimaryCtxRelease(dev));
  return 0;
}
