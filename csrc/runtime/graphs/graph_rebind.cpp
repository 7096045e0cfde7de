#include "runtime/graphs/graph_rebind.h"

#include <c10/util/SmallVector.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "runtime/launch/cuda_driver.h"
#include "runtime/graphs/rebind_words.h"

namespace trident::runtime {
namespace {

std::string error_name(CUresult r) {
  const char* name = "unknown CUDA error";
  cuda::driver().GetErrorName(r, &name);
  return name;
}

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string kernel_name(CUfunction f) {
  const char* name = nullptr;
  const auto& d = cuda::driver();
  if (!d.FuncGetName || d.FuncGetName(&name, f) != CUDA_SUCCESS || !name) return "a kernel";
  std::string s(name);
  return "kernel " + (s.size() > 80 ? s.substr(0, 80) + "..." : s);
}

// Why a word stops the plan, for explain.
std::string refusal(Word w, uint64_t va, uint64_t vb, uint64_t vc) {
  const std::string values = " (" + hex(va) + ", " + hex(vb) + ", " + hex(vc) + " with the arguments moved by s, 2s)";
  switch (w) {
    case Word::kStuck: return "holds an address inside an argument that did not move with it" + values;
    case Word::kEncoded: return "depends on an argument's address but is not one" + values;
    default: return "holds an address that is neither an argument's nor the graph's own memory" + values;
  }
}

std::vector<CUgraphNode> nodes_of(CUgraph g, std::string* why) {
  const auto& d = cuda::driver();
  size_t n = 0;
  std::vector<CUgraphNode> nodes;
  if (CUresult r = d.GraphGetNodes(g, nullptr, &n); r != CUDA_SUCCESS) return *why = "cuGraphGetNodes: " + error_name(r), nodes;
  nodes.resize(n);
  if (CUresult r = d.GraphGetNodes(g, nodes.data(), &n); r != CUDA_SUCCESS)
    return *why = "cuGraphGetNodes: " + error_name(r), std::vector<CUgraphNode>{};
  nodes.resize(n);
  return nodes;
}

bool same_launch(const KernelNode& a, const KernelNode& b) {
  const CUDA_KERNEL_NODE_PARAMS &p = a.params, &q = b.params;
  return a.func == b.func && p.gridDimX == q.gridDimX && p.gridDimY == q.gridDimY && p.gridDimZ == q.gridDimZ &&
         p.blockDimX == q.blockDimX && p.blockDimY == q.blockDimY && p.blockDimZ == q.blockDimZ &&
         p.sharedMemBytes == q.sharedMemBytes && a.buffer_size == b.buffer_size && a.offsets == b.offsets &&
         a.bytes.size() == b.bytes.size();
}

// A copy's or memset's device address field: a site, nothing to rewrite, or the refusal.
std::string copy_field(const WordClassifier& c, bool device, uint64_t va, uint64_t vb, uint64_t vc, uint32_t word,
                       std::vector<GraphRebind::Site>* sites) {
  int arg = -1;
  uint64_t delta = 0;
  const Word w = c.classify(va, vb, vc, &arg, &delta);
  if (w == Word::kUnmoved || w == Word::kPool) return {};
  if (w == Word::kSite && device) return sites->push_back({word, static_cast<uint32_t>(arg), delta}), std::string();
  return w == Word::kSite ? "a host copy's address moves with an argument" : refusal(w, va, vb, vc);
}

}  // namespace

std::optional<GraphRebind> GraphRebind::plan(CUgraph a, CUgraph b, CUgraph c, const std::vector<RebindArg>& args,
                                             const AddressRanges& pool, std::string* why) {
  const auto& d = cuda::driver();
  if (!d.rebind_api()) return *why = "the CUDA driver lacks the graph node update API", std::nullopt;
  const std::vector<CUgraphNode> na = nodes_of(a, why), nb = nodes_of(b, why), nc = nodes_of(c, why);
  if (!why->empty()) return std::nullopt;
  if (na.size() != nb.size() || na.size() != nc.size())
    return *why = "the captures differ in their nodes (" + std::to_string(na.size()) + ", " + std::to_string(nb.size()) +
                  " and " + std::to_string(nc.size()) + ")", std::nullopt;
  const WordClassifier cls{args, pool};
  GraphRebind plan;
  for (size_t i = 0; i < na.size(); ++i) {
    CUgraphNodeType ta = CU_GRAPH_NODE_TYPE_EMPTY, tb = CU_GRAPH_NODE_TYPE_EMPTY, tc = CU_GRAPH_NODE_TYPE_EMPTY;
    if (d.GraphNodeGetType(na[i], &ta) != CUDA_SUCCESS || d.GraphNodeGetType(nb[i], &tb) != CUDA_SUCCESS ||
        d.GraphNodeGetType(nc[i], &tc) != CUDA_SUCCESS || ta != tb || ta != tc)
      return *why = "the captures differ in node " + std::to_string(i) + "'s type", std::nullopt;
    Node n;
    n.node = na[i];
    n.type = ta;
    const std::string at = "node " + std::to_string(i) + " of " + std::to_string(na.size()) + ": ";
    // Node i's parameters in the three captures, through the driver's getter for its type.
    auto read_three = [&](auto get, auto* pa, auto* pb, auto* pc) {
      return get(na[i], pa) == CUDA_SUCCESS && get(nb[i], pb) == CUDA_SUCCESS && get(nc[i], pc) == CUDA_SUCCESS;
    };
    switch (ta) {
      case CU_GRAPH_NODE_TYPE_KERNEL: {
        KernelNode kb, kc;
        if (!KernelNode::read(na[i], &n.kernel, why) || !KernelNode::read(nb[i], &kb, why) ||
            !KernelNode::read(nc[i], &kc, why))
          return *why = at + *why, std::nullopt;
        if (!same_launch(n.kernel, kb) || !same_launch(n.kernel, kc))
          return *why = at + "the captures launch different kernels or shapes", std::nullopt;
        for (size_t w = 0; w < kb.bytes.size(); ++w) {
          const uint64_t va = n.kernel.bytes[w], vb = kb.bytes[w], vc = kc.bytes[w];
          int arg = -1;
          uint64_t delta = 0;
          const Word kind = cls.classify(va, vb, vc, &arg, &delta);
          if (kind == Word::kSite) n.sites.push_back({static_cast<uint32_t>(w), static_cast<uint32_t>(arg), delta});
          else if (kind == Word::kStuck || kind == Word::kEncoded)
            return *why = at + kernel_name(n.kernel.func) + ", parameter bytes " + std::to_string(8 * w) + "-" +
                          std::to_string(8 * w + 7) + " " + refusal(kind, va, vb, vc), std::nullopt;
        }
        break;
      }
      case CU_GRAPH_NODE_TYPE_MEMCPY: {
        CUDA_MEMCPY3D pb{}, pc{};
        if (!read_three(d.GraphMemcpyNodeGetParams, &n.copy, &pb, &pc))
          return *why = at + "a copy's parameters cannot be read", std::nullopt;
        const bool src_dev = n.copy.srcMemoryType == CU_MEMORYTYPE_DEVICE, dst_dev = n.copy.dstMemoryType == CU_MEMORYTYPE_DEVICE;
        std::string no = copy_field(cls, src_dev, n.copy.srcDevice, pb.srcDevice, pc.srcDevice, 0, &n.sites);
        if (no.empty()) no = copy_field(cls, dst_dev, n.copy.dstDevice, pb.dstDevice, pc.dstDevice, 1, &n.sites);
        if (!no.empty()) return *why = at + "a copy " + no, std::nullopt;
        pb.srcDevice = pc.srcDevice = n.copy.srcDevice, pb.dstDevice = pc.dstDevice = n.copy.dstDevice;
        if (std::memcmp(&pb, &n.copy, sizeof pb) != 0 || std::memcmp(&pc, &n.copy, sizeof pc) != 0)
          return *why = at + "the captures' copies differ", std::nullopt;
        break;
      }
      case CU_GRAPH_NODE_TYPE_MEMSET: {
        CUDA_MEMSET_NODE_PARAMS pb{}, pc{};
        if (!read_three(d.GraphMemsetNodeGetParams, &n.set, &pb, &pc))
          return *why = at + "a memset's parameters cannot be read", std::nullopt;
        if (std::string no = copy_field(cls, true, n.set.dst, pb.dst, pc.dst, 0, &n.sites); !no.empty())
          return *why = at + "a memset " + no, std::nullopt;
        pb.dst = pc.dst = n.set.dst;
        if (std::memcmp(&pb, &n.set, sizeof pb) != 0 || std::memcmp(&pc, &n.set, sizeof pc) != 0)
          return *why = at + "the captures' memsets differ", std::nullopt;
        break;
      }
      case CU_GRAPH_NODE_TYPE_EMPTY:
      case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      case CU_GRAPH_NODE_TYPE_EVENT_RECORD: break;  // no addresses
      default: return *why = at + "a node of type " + std::to_string(int(ta)) + " (not a kernel, copy or memset)", std::nullopt;
    }
    if (!n.sites.empty()) plan.nodes_.push_back(std::move(n));
  }
  return plan;
}

CUresult GraphRebind::apply(CUgraphExec exec, const uint64_t* ptrs, const uint64_t* held) const {
  const auto& d = cuda::driver();
  CUcontext ctx = nullptr;
  for (const Node& n : nodes_) {
    if (held && std::none_of(n.sites.begin(), n.sites.end(), [&](const Site& s) { return ptrs[s.arg] != held[s.arg]; }))
      continue;
    CUresult r = CUDA_SUCCESS;
    switch (n.type) {
      case CU_GRAPH_NODE_TYPE_KERNEL: {
        c10::SmallVector<uint64_t, 64> block(n.kernel.bytes.begin(), n.kernel.bytes.end());
        for (const Site& s : n.sites) block[s.word] = ptrs[s.arg] + s.delta;
        CUDA_KERNEL_NODE_PARAMS p = n.kernel.params;
        c10::SmallVector<void*, 32> args = n.kernel.param_pointers(block.data());
        size_t buffer_size = n.kernel.buffer_size;
        void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, block.data(), CU_LAUNCH_PARAM_BUFFER_SIZE, &buffer_size,
                         CU_LAUNCH_PARAM_END};
        p.kernelParams = buffer_size ? nullptr : args.data();
        p.extra = buffer_size ? extra : nullptr;
        r = d.GraphExecKernelNodeSetParams(exec, n.node, &p);
        break;
      }
      case CU_GRAPH_NODE_TYPE_MEMCPY: {
        CUDA_MEMCPY3D p = n.copy;
        for (const Site& s : n.sites) (s.word == 0 ? p.srcDevice : p.dstDevice) = ptrs[s.arg] + s.delta;
        if (!ctx && (r = d.CtxGetCurrent(&ctx)) != CUDA_SUCCESS) return r;
        r = d.GraphExecMemcpyNodeSetParams(exec, n.node, &p, ctx);
        break;
      }
      case CU_GRAPH_NODE_TYPE_MEMSET: {
        CUDA_MEMSET_NODE_PARAMS p = n.set;
        for (const Site& s : n.sites) p.dst = ptrs[s.arg] + s.delta;
        if (!ctx && (r = d.CtxGetCurrent(&ctx)) != CUDA_SUCCESS) return r;
        r = d.GraphExecMemsetNodeSetParams(exec, n.node, &p, ctx);
        break;
      }
      default: break;
    }
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

size_t GraphRebind::nodes_holding(uint32_t arg) const {
  size_t n = 0;
  for (const Node& node : nodes_)
    n += std::any_of(node.sites.begin(), node.sites.end(), [&](const Site& s) { return s.arg == arg; });
  return n;
}

size_t GraphRebind::sites() const {
  size_t n = 0;
  for (const Node& node : nodes_) n += node.sites.size();
  return n;
}

}  // namespace trident::runtime
