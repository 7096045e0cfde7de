#include "runtime/launch_record.h"

#include <c10/util/SmallVector.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "runtime/cuda_driver.h"

namespace trident::runtime {
namespace {

constexpr size_t kMaxNodes = 8;
constexpr size_t kMaxParams = 4096;

// One non-blocking stream per context, created on first use and kept for the process: captures are
// made on it so that the caller's stream is never in capture mode.
CUstream capture_stream(CUcontext ctx) {
  static std::mutex mu;
  static auto* streams = new std::unordered_map<CUcontext, CUstream>();  // never destroyed (exit order)
  std::lock_guard<std::mutex> lock(mu);
  auto it = streams->find(ctx);
  if (it != streams->end()) return it->second;
  CUstream s = nullptr;
  if (cuda::driver().StreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) return nullptr;
  streams->emplace(ctx, s);
  return s;
}

// A library call refused inside a capture (thread-local mode forbids, say, a synchronizing call)
// leaves its error as the CUDA runtime's last error, where PyTorch's next launch check would report
// it as its own. The runtime is PyTorch's (already loaded): clear it there.
void clear_runtime_error() {
  for (const char* name : {"libcudart.so.13", "libcudart.so.12"})
    if (void* lib = dlopen(name, RTLD_NOW | RTLD_NOLOAD)) {
      if (auto get_last = reinterpret_cast<int (*)()>(dlsym(lib, "cudaGetLastError"))) get_last();
      dlclose(lib);
      return;
    }
}

// The capture's nodes in execution order when they form one chain of kernel nodes; empty otherwise.
std::vector<CUgraphNode> kernel_chain(CUgraph graph) {
  const auto& d = cuda::driver();
  size_t n = 0;
  if (d.GraphGetNodes(graph, nullptr, &n) != CUDA_SUCCESS || n == 0 || n > kMaxNodes) return {};
  std::vector<CUgraphNode> nodes(n), order;
  if (d.GraphGetNodes(graph, nodes.data(), &n) != CUDA_SUCCESS) return {};
  std::vector<CUgraphNode> dep(n, nullptr);  // each node's one dependency (nullptr: the root)
  size_t roots = 0;
  for (size_t i = 0; i < n; ++i) {
    CUgraphNodeType type;
    size_t deps = 0;
    if (d.GraphNodeGetType(nodes[i], &type) != CUDA_SUCCESS || type != CU_GRAPH_NODE_TYPE_KERNEL) return {};
    if (d.GraphNodeGetDependencies(nodes[i], nullptr, &deps) != CUDA_SUCCESS || deps > 1) return {};
    if (deps == 1 && d.GraphNodeGetDependencies(nodes[i], &dep[i], &deps) != CUDA_SUCCESS) return {};
    roots += deps == 0;
  }
  if (roots != 1) return {};
  for (CUgraphNode prev = nullptr; order.size() < n;) {
    size_t next = n, found = 0;
    for (size_t i = 0; i < n; ++i)
      if (dep[i] == prev) next = i, ++found;
    if (found != 1) return {};  // a fork, or a node that follows nothing recorded
    order.push_back(nodes[next]);
    prev = nodes[next];
  }
  return order;
}

}  // namespace

std::optional<LaunchRecord> LaunchRecord::capture(const std::function<bool(CUstream)>& enqueue) {
  const auto& d = cuda::driver();
  if (!d.capture_api()) return std::nullopt;
  CUcontext ctx = nullptr;
  if (d.CtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx) return std::nullopt;
  CUstream side = capture_stream(ctx);
  if (!side || d.StreamBeginCapture(side, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) != CUDA_SUCCESS) return std::nullopt;
  const bool enqueued = enqueue(side);
  CUgraph graph = nullptr;
  const CUresult ended = d.StreamEndCapture(side, &graph);
  if (!enqueued || ended != CUDA_SUCCESS || !graph) {
    if (graph) d.GraphDestroy(graph);
    clear_runtime_error();
    return std::nullopt;
  }

  LaunchRecord rec;
  bool ok = true;
  for (CUgraphNode node : kernel_chain(graph)) {
    CUDA_KERNEL_NODE_PARAMS p{};
    Launch l;
    ok = d.GraphKernelNodeGetParams(node, &p) == CUDA_SUCCESS && p.extra == nullptr;
    if (ok && !p.func && p.kern) ok = d.KernelGetFunction(&l.func, p.kern) == CUDA_SUCCESS;
    else l.func = p.func;
    ok = ok && l.func;
    size_t total = 0;
    std::vector<std::pair<size_t, size_t>> params;  // (offset, size)
    for (size_t i = 0; ok && i < kMaxParams; ++i) {
      size_t off = 0, size = 0;
      if (d.FuncGetParamInfo(l.func, i, &off, &size) != CUDA_SUCCESS) break;  // past the last parameter
      params.emplace_back(off, size);
      total = std::max(total, off + size);
    }
    ok = ok && (params.empty() || p.kernelParams);
    if (!ok) break;
    l.bytes.assign((total + 7) / 8, 0);
    for (size_t i = 0; i < params.size(); ++i) {
      std::memcpy(reinterpret_cast<char*>(l.bytes.data()) + params[i].first, p.kernelParams[i], params[i].second);
      l.offsets.push_back(static_cast<uint32_t>(params[i].first));
    }
    l.grid[0] = p.gridDimX, l.grid[1] = p.gridDimY, l.grid[2] = p.gridDimZ;
    l.block[0] = p.blockDimX, l.block[1] = p.blockDimY, l.block[2] = p.blockDimZ;
    l.shared_bytes = p.sharedMemBytes;
    auto keep = [&](CUlaunchAttributeID id, auto is_set) {
      CUkernelNodeAttrValue v{};
      if (d.GraphKernelNodeGetAttribute(node, id, &v) == CUDA_SUCCESS && is_set(v)) {
        CUlaunchAttribute a{};
        a.id = id;
        a.value = v;
        l.attrs.push_back(a);
      }
    };
    keep(CU_LAUNCH_ATTRIBUTE_COOPERATIVE, [](const CUkernelNodeAttrValue& v) { return v.cooperative != 0; });
    keep(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, [](const CUkernelNodeAttrValue& v) { return v.clusterDim.x != 0; });
    keep(CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE,
         [](const CUkernelNodeAttrValue& v) { return v.clusterSchedulingPolicyPreference != 0; });
    keep(CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION,
         [](const CUkernelNodeAttrValue& v) { return v.preferredClusterDim.x != 0; });
    rec.launches_.push_back(std::move(l));
  }
  d.GraphDestroy(graph);
  if (!ok || rec.launches_.empty()) return std::nullopt;
  return rec;
}

bool LaunchRecord::replay(CUstream stream) const {
  const auto& d = cuda::driver();
  for (const Launch& l : launches_) {
    c10::SmallVector<void*, 32> args;
    char* base = const_cast<char*>(reinterpret_cast<const char*>(l.bytes.data()));  // the driver only reads
    for (uint32_t off : l.offsets) args.push_back(base + off);
    CUlaunchConfig cfg{};
    cfg.gridDimX = l.grid[0], cfg.gridDimY = l.grid[1], cfg.gridDimZ = l.grid[2];
    cfg.blockDimX = l.block[0], cfg.blockDimY = l.block[1], cfg.blockDimZ = l.block[2];
    cfg.sharedMemBytes = l.shared_bytes;
    cfg.hStream = stream;
    cfg.attrs = const_cast<CUlaunchAttribute*>(l.attrs.data());
    cfg.numAttrs = static_cast<unsigned>(l.attrs.size());
    if (d.LaunchKernelEx(&cfg, l.func, args.data(), nullptr) != CUDA_SUCCESS) return false;
  }
  return true;
}

}  // namespace trident::runtime
