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
// Five more diagnostics time what a graph replay (graph mode) is made of, on a stream of its own:
// `graph1` and `graph3`, cuGraphLaunch of a graph of one and of three such launches; `memcpy`,
// cuMemcpyDtoDAsync of 16 KiB; `kpatch`, cuGraphExecKernelNodeSetParams of one kernel of
// `graph3` (its output pointer alternating) then its launch; `mpatch`, the same through a copy node
// appended to `graph1` (cuGraphExecMemcpyNodeSetParams, its destination alternating).
//
// Build: nvcc -O2 -arch=sm_90 native_floor.cu -o native_floor -lcuda
// Usage: native_floor [launches_per_repeat=20000] [repeats=7] [abi=plain|triton|params|graph1|graph3|memcpy|kpatch|mpatch]
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
  const std::vector<std::string> modes = {"plain", "triton", "params", "graph1", "graph3", "memcpy", "kpatch", "mpatch"};
  const int mode = static_cast<int>(std::find(modes.begin(), modes.end(), abi) - modes.begin());
  if (mode == static_cast<int>(modes.size())) {
    std::fprintf(stderr, "abi must be one of plain, triton, params, graph1, graph3, memcpy, kpatch, mpatch; got %s\n",
                 abi.c_str());
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

  // The graph modes' stream (the legacy stream cannot capture), buffers, graphs and patch targets.
  CUstream side = nullptr;
  CUdeviceptr buf[3] = {0, 0, 0};
  CUgraphExec exec = nullptr;
  CUgraphNode last = nullptr;  // kpatch: the third kernel; mpatch: the copy
  CUDA_KERNEL_NODE_PARAMS kernel_params;
  CUDA_MEMCPY3D copy_params;
  uint64_t patched_out = out;
  void* patched_params[] = {&x, &patched_out, &count, &global_scratch, &profile_scratch};
  if (mode >= 3) {
    CHECK(cuStreamCreate(&side, CU_STREAM_NON_BLOCKING));
    for (CUdeviceptr& b : buf) CHECK(cuMemAlloc(&b, 1 << 14));
    stream = side;
  }
  if (mode == 3 || mode == 4 || mode == 6 || mode == 7) {
    CUgraph graph;
    CHECK(cuStreamBeginCapture(side, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    for (int k = 0; k < (mode == 3 || mode == 7 ? 1 : 3); ++k)
      CHECK(cuLaunchKernel(abi_fn, 1, 1, 1, 128, 1, 1, 0, side, params, nullptr));
    if (mode == 7) CHECK(cuMemcpyDtoDAsync(buf[1], buf[0], 1 << 14, side));
    CHECK(cuStreamEndCapture(side, &graph));
    size_t n = 0;
    CHECK(cuGraphGetNodes(graph, nullptr, &n));
    std::vector<CUgraphNode> nodes(n);
    CHECK(cuGraphGetNodes(graph, nodes.data(), &n));
    CHECK(cuGraphInstantiateWithFlags(&exec, graph, 0));
    for (CUgraphNode node : nodes) {  // kpatch: a kernel (any costs the same); mpatch: the copy
      CUgraphNodeType type;
      CHECK(cuGraphNodeGetType(node, &type));
      if (type == (mode == 7 ? CU_GRAPH_NODE_TYPE_MEMCPY : CU_GRAPH_NODE_TYPE_KERNEL)) last = node;
    }
    if (mode == 6) CHECK(cuGraphKernelNodeGetParams(last, &kernel_params));
    if (mode == 7) CHECK(cuGraphMemcpyNodeGetParams(last, &copy_params));
    kernel_params.kernelParams = patched_params;
    kernel_params.extra = nullptr;
  }

  auto launch_loop = [&](int n) -> CUresult {
    for (int i = 1; i <= n; ++i) {
      CUresult r = CUDA_SUCCESS;
      switch (mode) {
        case 0: r = cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr); break;
        case 1: r = cuLaunchKernelEx(&config, abi_fn, params, nullptr); break;
        case 2: r = cuLaunchKernel(abi_fn, 1, 1, 1, 128, 1, 1, 0, stream, params, nullptr); break;
        case 5: r = cuMemcpyDtoDAsync(buf[1], buf[0], 1 << 14, side); break;
        case 6:
          patched_out = (i & 1) ? buf[1] : buf[2];
          r = cuGraphExecKernelNodeSetParams(exec, last, &kernel_params);
          break;
        case 7:
          copy_params.dstDevice = (i & 1) ? buf[1] : buf[2];
          r = cuGraphExecMemcpyNodeSetParams(exec, last, &copy_params, ctx);
          break;
        default: break;
      }
      if (r == CUDA_SUCCESS && mode >= 3 && mode != 5) r = cuGraphLaunch(exec, side);
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
