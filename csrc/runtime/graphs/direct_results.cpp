#include "runtime/graphs/direct_results.h"

#include <algorithm>
#include <map>
#include <set>

#include "runtime/graphs/scalar_patch.h"

namespace trident::runtime {
namespace {

using IK = ir::Instr::Kind;
using OK = ir::Operand::Kind;

bool allocates_only(const std::string& op) {
  static const std::set<std::string> ops = {"aten::empty.memory_format", "aten::empty_strided", "aten::empty_like",
                                            "aten::new_empty", "aten::new_empty_strided"};
  return ops.count(op) > 0;
}

// Counts each slot %N in `o` (a tree: lists, tuples, dicts, ptr(...), objects and updates).
void count_slots(const ir::Operand& o, std::map<int64_t, int>& n) {
  if (o.kind == OK::Value) ++n[o.i];
  for (const ir::Operand& it : o.items) count_slots(it, n);
}

// The slot a launch operand passes as a pointer: %N, or ptr(%N, off)'s base; -1 otherwise.
int64_t pointer_slot(const ir::Operand& o) {
  if (o.kind == OK::Value) return o.i;
  if (o.kind == OK::Ptr && !o.items.empty() && o.items[0].kind == OK::Value) return o.items[0].i;
  return -1;
}

}  // namespace

std::vector<DirectResult> direct_results(const std::vector<ir::Instr>& sites, const std::vector<ir::Kernel>& kernels,
                                         const ir::Operand& output) {
  std::map<int64_t, int> returned;
  count_slots(output, returned);
  std::map<int64_t, DirectResult> found;  // candidates by slot, dropped when disqualified
  std::set<int64_t> out;                  // disqualified
  bool all_rewritable = true;             // every launch one a node can be rewritten for
  for (int32_t k = 0; k < static_cast<int32_t>(sites.size()); ++k) {
    const ir::Instr& in = sites[k];
    if (in.kind == IK::Call) {
      std::map<int64_t, int> taken;
      for (const ir::Operand& o : in.operands) count_slots(o, taken);
      for (const auto& [slot, n] : taken) out.insert(slot);  // an ATen call sees it
      if (in.results.size() == 1 && allocates_only(in.op)) {
        const int64_t slot = in.results[0];
        if (auto r = returned.find(slot); r != returned.end() && r->second == 1) {
          DirectResult d;
          d.slot = static_cast<int32_t>(slot);
          d.alloc_site = k;
          found.emplace(slot, std::move(d));
        }
      }
      continue;
    }
    if (in.kind != IK::Launch) continue;
    const ir::Kernel* kernel = in.a >= 0 && in.a < static_cast<int64_t>(kernels.size()) ? &kernels[in.a] : nullptr;
    const bool rewritable = kernel && unpatchable(*kernel, false).empty();
    all_rewritable = all_rewritable && rewritable;
    for (uint32_t p = 0; p < in.operands.size(); ++p) {
      const int64_t slot = pointer_slot(in.operands[p]);
      std::map<int64_t, int> other;  // a slot anywhere else in the operand (not a plain pointer)
      count_slots(in.operands[p], other);
      for (const auto& [s, n] : other)
        if (s != slot || n != 1) out.insert(s);
      if (slot < 0) continue;
      auto it = found.find(slot);
      if (it == found.end()) continue;
      if (!rewritable) out.insert(slot);
      it->second.uses.push_back({k, p});
    }
  }
  std::vector<DirectResult> r;
  if (!all_rewritable) return r;  // a rebind's patch run could not rewrite that launch (header)
  for (auto& [slot, d] : found)
    if (!out.count(slot) && !d.uses.empty()) r.push_back(std::move(d));
  return r;
}

std::string describe(const std::vector<DirectResult>& results, const std::vector<ir::Instr>& sites) {
  std::string s;
  for (const DirectResult& d : results) {
    s += "slot " + std::to_string(d.slot) + " (site " + std::to_string(d.alloc_site) + " " + sites[d.alloc_site].op + "):";
    for (size_t u = 0; u < d.uses.size(); ++u)
      s += std::string(u ? "," : "") + " site " + std::to_string(d.uses[u].site) + " param " + std::to_string(d.uses[u].param);
    s += "\n";
  }
  return s;
}

}  // namespace trident::runtime
