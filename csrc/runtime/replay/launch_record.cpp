#include "runtime/replay/launch_record.h"

#include <c10/util/SmallVector.h>

#include <algorithm>
#include <cstring>

#include "runtime/launch/cuda_driver.h"
#include "runtime/launch/kernel_node.h"

namespace trident::runtime {
namespace {

constexpr size_t kMaxNodes = 8;

// A node's dependencies (at most `cap`); programmatic (PDL) edges count as plain ones. The _v2 entry
// point reads edges with non-default data, which the first one refuses (CUDA_ERROR_LOSSY_QUERY).
CUresult dependencies(CUgraphNode node, CUgraphNode* deps, size_t* n) {
  const auto& d = cuda::driver();
  if (!d.GraphNodeGetDependencies2) return d.GraphNodeGetDependencies(node, deps, n);
  std::vector<CUgraphEdgeData> edges(deps ? *n : 0);
  return d.GraphNodeGetDependencies2(node, deps, deps ? edges.data() : nullptr, n);
}

std::string error_name(CUresult r) {
  const char* name = "unknown CUDA error";
  cuda::driver().GetErrorName(r, &name);
  return name;
}

// The capture's nodes in execution order when they form one chain of kernel nodes; empty, with the
// reason in *why, otherwise.
std::vector<CUgraphNode> kernel_chain(CUgraph graph, std::string* why) {
  const auto& d = cuda::driver();
  size_t n = 0;
  if (d.GraphGetNodes(graph, nullptr, &n) != CUDA_SUCCESS || n == 0 || n > kMaxNodes) {
    *why = "the capture holds " + std::to_string(n) + " nodes (1 to " + std::to_string(kMaxNodes) + " replayable)";
    return {};
  }
  std::vector<CUgraphNode> nodes(n), order;
  if (d.GraphGetNodes(graph, nodes.data(), &n) != CUDA_SUCCESS) return *why = "cuGraphGetNodes failed", order;
  std::vector<CUgraphNode> dep(n, nullptr);  // each node's one dependency (nullptr: the root)
  size_t roots = 0;
  for (size_t i = 0; i < n; ++i) {
    CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
    size_t deps = 0;
    if (d.GraphNodeGetType(nodes[i], &type) != CUDA_SUCCESS || type != CU_GRAPH_NODE_TYPE_KERNEL)
      return *why = "the capture holds a node of type " + std::to_string(int(type)) + ", not a kernel", order;
    if (CUresult r = dependencies(nodes[i], nullptr, &deps); r != CUDA_SUCCESS)
      return *why = "cuGraphNodeGetDependencies: " + error_name(r), order;
    if (deps > 1) return *why = "the captured kernels are not one chain (a join)", order;
    if (CUresult r = deps == 1 ? dependencies(nodes[i], &dep[i], &deps) : CUDA_SUCCESS; r != CUDA_SUCCESS)
      return *why = "cuGraphNodeGetDependencies: " + error_name(r), order;
    roots += deps == 0;
  }
  if (roots != 1) return *why = "the captured kernels are not one chain (" + std::to_string(roots) + " roots)", order;
  for (CUgraphNode prev = nullptr; order.size() < n;) {
    size_t next = n, found = 0;
    for (size_t i = 0; i < n; ++i)
      if (dep[i] == prev) next = i, ++found;
    if (found != 1) return *why = "the captured kernels are not one chain (a fork)", std::vector<CUgraphNode>{};
    order.push_back(nodes[next]);
    prev = nodes[next];
  }
  return order;
}

}  // namespace

std::optional<LaunchRecord> LaunchRecord::capture(const std::function<bool(CUstream)>& enqueue, std::string* why) {
  const auto& d = cuda::driver();
  if (!d.capture_api()) return *why = "the CUDA driver lacks the graph inspection API (CUDA 12.4 or newer)", std::nullopt;
  CUstream side = cuda::private_stream(0);
  if (!side) return *why = "no current CUDA context, or cuStreamCreate failed", std::nullopt;
  if (CUresult r = d.StreamBeginCapture(side, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL); r != CUDA_SUCCESS)
    return *why = "cuStreamBeginCapture: " + error_name(r), std::nullopt;
  const bool enqueued = enqueue(side);
  CUgraph graph = nullptr;
  const CUresult ended = d.StreamEndCapture(side, &graph);
  if (!enqueued || ended != CUDA_SUCCESS || !graph) {
    if (graph) d.GraphDestroy(graph);
    cuda::clear_runtime_error();
    *why = !enqueued ? "the library call failed under stream capture" : "cuStreamEndCapture: " + error_name(ended);
    return std::nullopt;
  }

  LaunchRecord rec;
  bool ok = true;
  for (CUgraphNode node : kernel_chain(graph, why)) {
    KernelNode k;
    if (!KernelNode::read(node, &k, why)) {
      ok = false;
      break;
    }
    const CUDA_KERNEL_NODE_PARAMS& p = k.params;
    Launch l;
    l.func = k.func;
    l.bytes = std::move(k.bytes);
    l.offsets = std::move(k.offsets);
    l.buffer_size = k.buffer_size;
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

CUresult LaunchRecord::replay(CUstream stream) const {
  const auto& d = cuda::driver();
  for (const Launch& l : launches_) {
    c10::SmallVector<void*, 32> args;
    char* base = const_cast<char*>(reinterpret_cast<const char*>(l.bytes.data()));  // the driver only reads
    for (uint32_t off : l.offsets) args.push_back(base + off);
    size_t buffer_size = l.buffer_size;
    void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, base, CU_LAUNCH_PARAM_BUFFER_SIZE, &buffer_size,
                     CU_LAUNCH_PARAM_END};
    CUlaunchConfig cfg{};
    cfg.gridDimX = l.grid[0], cfg.gridDimY = l.grid[1], cfg.gridDimZ = l.grid[2];
    cfg.blockDimX = l.block[0], cfg.blockDimY = l.block[1], cfg.blockDimZ = l.block[2];
    cfg.sharedMemBytes = l.shared_bytes;
    cfg.hStream = stream;
    cfg.attrs = const_cast<CUlaunchAttribute*>(l.attrs.data());
    cfg.numAttrs = static_cast<unsigned>(l.attrs.size());
    const CUresult r = l.buffer_size ? d.LaunchKernelEx(&cfg, l.func, nullptr, extra)
                                     : d.LaunchKernelEx(&cfg, l.func, args.data(), nullptr);
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

std::string LaunchRecord::error_text(CUresult r) { return error_name(r); }

}  // namespace trident::runtime
