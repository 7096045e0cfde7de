// Native floor: host cost of launching an empty kernel from C++ through the CUDA driver API.
//
// Loads an empty kernel from PTX with cuModuleLoadData (as Triton loads its cubins), then times
// loops of cuLaunchKernel on the default stream with a stream sync every 100 launches (the same
// method as the Python side). Prints one number: the median µs per launch over the repeats.
//
// `abi` picks what is launched. `plain` (the suite's floor): cuLaunchKernel of a kernel without
// parameters. Two diagnostics (benchmarks/percall_interleaved.py) launch an empty kernel with the
// parameters of a Triton 3.6 kernel like the suite's add_one (pointer, pointer, i32, global scratch
// pointer, profile scratch pointer) and 128 threads: `triton` through cuLaunchKernelEx with a
// launch config and no attributes, as Triton's launcher does; `params` through cuLaunchKernel.
//
// Build: nvcc -O2 -arch=sm_90 native_floor.cu -o native_floor -lcuda
// Usage: native_floor [launches_per_repeat=20000] [repeats=7] [abi=plain|triton|params]
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

// PTX for sm_50 is JIT-compiled by the driver for whatever GPU is present.
static const char kPtx[] =
    ".version 6.0\n"
    ".target sm_50\n"
    ".address_size 64\n"
    ".visible .entry empty_kernel()\n"
    "{\n"
    "  ret;\n"
    "}\n"
    ".visible .entry triton_abi_kernel(.param .u64 x, .param .u64 out, .param .u32 n,\n"
    "                                  .param .u64 global_scratch, .param .u64 profile_scratch)\n"
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
  const std::string abi = argc > 3 ? argv[3] : "plain";
  if (abi != "plain" && abi != "triton" && abi != "params") {
    std::fprintf(stderr, "abi must be plain, triton or params, got %s\n", abi.c_str());
    return 2;
  }

  CUdevice dev;
  CUcontext ctx;
  CUmodule mod;
  CUfunction fn, abi_fn;
  CUstream stream = nullptr;  // the legacy default stream, as eager PyTorch uses
  CHECK(cuInit(0));
  CHECK(cuDeviceGet(&dev, 0));
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  CHECK(cuModuleLoadData(&mod, kPtx));
  CHECK(cuModuleGetFunction(&fn, mod, "empty_kernel"));
  CHECK(cuModuleGetFunction(&abi_fn, mod, "triton_abi_kernel"));

  // The triton ABI's parameters: values as a call would pass them (nothing is dereferenced).
  uint64_t x = 0x10000, out = 0x20000, global_scratch = 0, profile_scratch = 0;
  uint32_t count = 4096;
  void* params[] = {&x, &out, &count, &global_scratch, &profile_scratch};
  CUlaunchConfig config;
  std::memset(&config, 0, sizeof config);
  config.gridDimX = config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = 128;  // Triton's num_warps=4
  config.blockDimY = config.blockDimZ = 1;
  config.hStream = stream;
  const int mode = abi == "plain" ? 0 : abi == "triton" ? 1 : 2;

  auto launch_loop = [&](int n) -> CUresult {
    for (int i = 1; i <= n; ++i) {
      CUresult r = mode == 0 ? cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr)
                   : mode == 1 ? cuLaunchKernelEx(&config, abi_fn, params, nullptr)
                               : cuLaunchKernel(abi_fn, 1, 1, 1, 128, 1, 1, 0, stream, params, nullptr);
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
