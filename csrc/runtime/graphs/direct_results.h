// Direct results: a CUDA graph's result written by its kernels straight into the tensor a replay
// returns, instead of into the graph's own memory and then copied out by a copy node.
//
// Every graph node costs the host time at each launch (about 0.7 µs on an H200 with torch 2.11,
// benchmarks/NOTES.md session 33): one user kernel was two nodes, the kernel and its result's copy.
// A result qualifies when the program shows that nothing but Triton launches touches its memory:
//   - it is made by an allocation that writes nothing (empty, empty_strided, empty_like, new_empty,
//     new_empty_strided) and is that call's only result;
//   - no other ATen call takes it (no view of it, no copy into it, no read of it), so every address
//     of its memory in the graph is a Triton launch's pointer parameter, which the host program
//     computes exactly (base plus a byte offset); ATen kernels, which may hold an address in ways
//     only they know, never see it;
//   - every launch of the program is one a node can be rewritten for (no tensor descriptors,
//     clusters, cooperative or programmatic dependent launches; scalar_patch.h's rule): those that
//     take it, and the others too, because a graph with direct results follows each rebind with a
//     patch run (spec_graphs.cpp, launch), which rewrites every launch whose arguments moved, and a
//     refused patch would drop the graph;
//   - it appears once in the output tree (a result returned twice shares memory with itself, which
//     graphs refuse anyway).
// A replay then points those launches' nodes at the fresh tensor (scalar_patch.h: point_results),
// only when it lies somewhere else than the nodes write now: a caller that drops each result gets
// the same block back and no node is rewritten.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/ir.h"

namespace trident::runtime {

struct DirectResult {
  int32_t slot = -1;        // the result's frame slot
  int32_t alloc_site = -1;  // the allocation site that makes it
  struct Use {
    int32_t site;    // a launch site taking it
    uint32_t param;  // as that launch's parameter `param`
  };
  std::vector<Use> uses;  // at least one
};

// The results of a spec's program that its graphs may write directly, from the program in site form
// (codegen's sites, kernels and output tree: tensors by slot, sites in program order).
std::vector<DirectResult> direct_results(const std::vector<ir::Instr>& sites, const std::vector<ir::Kernel>& kernels,
                                         const ir::Operand& output);

// One line per direct result, for tests and explain: "slot 2 (site 4 aten::empty.memory_format):
// site 5 param 1".
std::string describe(const std::vector<DirectResult>& results, const std::vector<ir::Instr>& sites);

}  // namespace trident::runtime
