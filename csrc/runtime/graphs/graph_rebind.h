// Rebinding a whole-run CUDA graph (spec_graphs.h) to new argument addresses without capturing again.
//
// A decode step's graph holds the KV cache's address in its nodes; generate() makes a new cache each
// call, and a freed and reallocated argument comes back elsewhere. Rewriting the nodes that hold an
// argument's address costs microseconds; a new capture costs a whole host-bound run and an
// instantiation. Which bytes hold an address is found, not guessed: the program is captured twice
// more with each rebindable argument moved, by its own shift s_i in capture b and by 2 s_i in
// capture c (nothing runs under capture, so the moved addresses are never touched). Comparing the
// captures node by node, an 8-byte word with values va, vb, vc is
//   - a site when va lies in argument i's extent and vb = va + s_i, vc = va + 2 s_i: a rebind writes
//     the new address plus the same offset there;
//   - the graph's own memory when all three lie in the pool's segments (intermediates);
//   - an address encoded some other way when it moved consistently with the shifts (vc - va =
//     2 (vb - va), a small multiple of s_0 scaled by a power of two or truncated to 32 bits: a
//     descriptor holding an address shifted or truncated, a difference of two addresses): no plan;
//   - left alone when it is equal in all three and lies in no argument, or when its values follow
//     no shift (bytes a launch leaves uninitialized, such as the unused dimensions of ATen's
//     TensorInfo or leftovers of the host stack: no kernel result can depend on them).
// A word equal in all three that lies inside an argument (an address that did not follow it), a
// copy or memset whose addresses are not sites or pool memory, different kernels or launch shapes,
// host nodes, child graphs and memory nodes give no plan: the graph then stays keyed by its
// addresses. Words equal in all captures depend on the arguments' addresses at most through their
// alignment, which the shifts keep (multiples of 64 KiB) and the graph's key holds
// (SpecGraphs::kAlignBits). Not detected: an address split into two 32-bit halves in different
// words, which no kernel PyTorch, cuBLAS, cuDNN or Triton launches passes.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/launch/kernel_node.h"
#include "runtime/graphs/rebind_words.h"

namespace trident::runtime {

class GraphRebind {
 public:
  // A place in a node that holds argument `arg`'s address plus `delta`.
  struct Site {
    uint32_t word;  // kernel: 8-byte word of the parameter block; copy: 0 source, 1 destination
    uint32_t arg;
    uint64_t delta;  // the address minus the argument's
  };

  // The plan from capture `a` (arguments at args[i].ptr) and captures `b` and `c` of the same program
  // (argument i at ptr + shift, ptr + 2 shift), all three in the pool whose segments are `pool`.
  // nullopt with the reason in *why.
  static std::optional<GraphRebind> plan(CUgraph a, CUgraph b, CUgraph c, const std::vector<RebindArg>& args,
                                         const AddressRanges& pool, std::string* why);

  // Rewrites the sites of `exec` (instantiated from `a`) for argument i at ptrs[i]: every node with
  // a site, or with `held` (the addresses the nodes hold now), only the nodes holding an argument
  // whose address changed. The first error the driver reports, or CUDA_SUCCESS.
  CUresult apply(CUgraphExec exec, const uint64_t* ptrs, const uint64_t* held = nullptr) const;

  size_t sites() const;
  // The nodes holding argument `arg`'s address: what moving it alone costs.
  size_t nodes_holding(uint32_t arg) const;
  size_t nodes() const { return nodes_.size(); }

 private:
  struct Node {
    CUgraphNode node = nullptr;
    CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
    KernelNode kernel;
    CUDA_MEMCPY3D copy{};
    CUDA_MEMSET_NODE_PARAMS set{};
    std::vector<Site> sites;
  };
  std::vector<Node> nodes_;  // the nodes with sites
};

}  // namespace trident::runtime
