#include "runtime/launch/kernel_node.h"

#include <algorithm>
#include <cstring>

#include "runtime/launch/cuda_driver.h"

namespace trident::runtime {
namespace {

constexpr size_t kMaxParams = 4096;

std::string error_name(CUresult r) {
  const char* name = "unknown CUDA error";
  cuda::driver().GetErrorName(r, &name);
  return name;
}

}  // namespace

bool KernelNode::read(CUgraphNode node, KernelNode* out, std::string* why) {
  const auto& d = cuda::driver();
  KernelNode& k = *out;
  CUDA_KERNEL_NODE_PARAMS& p = k.params;
  p = {};
  if (CUresult r = d.GraphKernelNodeGetParams(node, &p); r != CUDA_SUCCESS)
    return *why = "cuGraphKernelNodeGetParams: " + error_name(r), false;
  k.func = p.func;
  if (!k.func && p.kern && d.KernelGetFunction(&k.func, p.kern) != CUDA_SUCCESS) k.func = nullptr;
  if (!k.func) return *why = "a captured kernel has no function handle", false;
  k.bytes.clear();
  k.offsets.clear();
  k.buffer_size = 0;
  if (p.extra) {  // the parameters as one buffer: {BUFFER_POINTER, p, BUFFER_SIZE, &n, END}
    const void* buf = nullptr;
    size_t size = 0;
    int entries = 0;
    bool ok = true;
    for (void** e = p.extra; ok && *e != CU_LAUNCH_PARAM_END; e += 2, ++entries) {
      if (*e == CU_LAUNCH_PARAM_BUFFER_POINTER) buf = e[1];
      else if (*e == CU_LAUNCH_PARAM_BUFFER_SIZE) size = *static_cast<const size_t*>(e[1]);
      else ok = false;
      ok = ok && entries < 8;
    }
    if (!ok || !buf) return *why = "a captured kernel's parameter buffer cannot be read", false;
    k.buffer_size = size;
    k.bytes.assign((size + 7) / 8, 0);
    std::memcpy(k.bytes.data(), buf, size);
    return true;
  }
  size_t total = 0;
  std::vector<std::pair<size_t, size_t>> params;  // (offset, size)
  for (size_t i = 0; i < kMaxParams; ++i) {
    size_t off = 0, size = 0;
    if (d.FuncGetParamInfo(k.func, i, &off, &size) != CUDA_SUCCESS) break;  // past the last parameter
    params.emplace_back(off, size);
    total = std::max(total, off + size);
  }
  if (!params.empty() && !p.kernelParams) return *why = "a captured kernel's parameters cannot be read", false;
  k.bytes.assign((total + 7) / 8, 0);
  for (size_t i = 0; i < params.size(); ++i) {
    std::memcpy(reinterpret_cast<char*>(k.bytes.data()) + params[i].first, p.kernelParams[i], params[i].second);
    k.offsets.push_back(static_cast<uint32_t>(params[i].first));
  }
  return true;
}

c10::SmallVector<void*, 32> KernelNode::param_pointers(const uint64_t* block) const {
  c10::SmallVector<void*, 32> args;
  char* base = const_cast<char*>(reinterpret_cast<const char*>(block));  // the driver only reads
  for (uint32_t off : offsets) args.push_back(base + off);
  return args;
}

}  // namespace trident::runtime
