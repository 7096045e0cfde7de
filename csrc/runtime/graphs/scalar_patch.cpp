#include "runtime/graphs/scalar_patch.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <map>
#include <utility>

#include "runtime/aten/aten_site.h"
#include "runtime/aten/tensor_over.h"
#include "runtime/graphs/graph_keys.h"
#include "runtime/launch/cuda_driver.h"
#include "runtime/launch/triton_launch.h"
#include "runtime/launch/launch_args.h"

namespace trident::runtime {
namespace {

using IK = ir::Instr::Kind;
using OK = ir::Operand::Kind;

uint64_t address(const at::Tensor& t) { return reinterpret_cast<uint64_t>(t.data_ptr()); }

// The symbols computed from scalar leaves: {id, float?} -> the leaf.
using ScalarSyms = std::map<std::pair<int64_t, bool>, int64_t>;

// The scalar leaf the first such symbol in `ops` (operands, items included) comes from, or -1.
int64_t first_leaf(const ScalarSyms& from, const std::vector<ir::Operand>& ops) {
  for (const ir::Operand& o : ops) {
    if (o.kind == OK::Sym)
      if (auto it = from.find({o.i, o.j == 1}); it != from.end()) return it->second;
    if (int64_t l = first_leaf(from, o.items); l >= 0) return l;
  }
  return -1;
}

}  // namespace

// What a patch cannot rewrite in a kernel's node, or "". Scratch memory is sized by the grid: the
// capture's serves a node whose grid stays (`grid_changes` false).
std::string unpatchable(const ir::Kernel& k, bool grid_changes) {
  if (grid_changes && (k.global_scratch > 0 || k.profile_scratch > 0)) return "scratch memory sized by its grid";
  if (!k.tma.empty()) return "tensor descriptors";
  if (k.num_ctas != 1) return "clusters";
  if (k.cooperative) return "a cooperative launch";
  if (k.launch_pdl) return "a programmatic dependent launch";
  return "";
}

std::string ScalarPatch::keyed_by(const ir::Spec& s) {
  ScalarSyms from;  // followed through arithmetic
  auto takes = [](const std::string& what, int64_t leaf) {
    return what + " takes a number computed from scalar argument leaf " + std::to_string(leaf);
  };
  for (const ir::Instr& in : s.body) {
    switch (in.kind) {
      case IK::SymLeaf: from[{in.results[0], false}] = in.a; break;
      case IK::FloatLeaf: from[{in.results[0], true}] = in.a; break;
      case IK::SymBin:
      case IK::FloatOp:
        if (int64_t l = first_leaf(from, in.operands); l >= 0) from[{in.results[0], in.kind == IK::FloatOp}] = l;
        break;
      case IK::Call:
        if (int64_t l = first_leaf(from, in.operands); l >= 0) return takes(in.op, l);
        break;
      case IK::Launch: {
        int64_t l = first_leaf(from, in.operands);
        if (l < 0) l = first_leaf(from, in.grid);
        if (l < 0) break;
        for (const ir::Kernel& k : s.kernels)
          if (k.id == in.a)
            if (std::string no = unpatchable(k, true); !no.empty()) return takes("Triton kernel " + k.name + " (" + no + ")", l);
        break;
      }
      default: break;
    }
  }
  return "";
}

void ScalarPatch::record_call(int32_t site, const AtenSite& s, const trd_frame& f, const int64_t* dyn) {
  Event e;
  e.site = site;
  if (s.ndyn > 0) e.dyn.assign(dyn, dyn + s.ndyn);
  for (int32_t slot : s.result_slots) {
    const at::Tensor& t = f.slots[slot];
    Result r;
    if (!t.defined() || !t.is_cuda() || !t.has_storage() || t.storage().nbytes() == 0) {
      r.t = t;  // nothing, or no device memory to hold on to
    } else {
      for (int32_t leaf = 0; leaf < f.nargs && r.leaf < 0; ++leaf) {
        const at::Tensor* a = f.args[leaf];
        if (a && a->defined() && a->has_storage() && t.storage().is_alias_of(a->storage()))
          r.leaf = leaf, r.delta = address(t) - address(*a);
      }
      r.t = tensor_over(t, address(t));
    }
    e.results.push_back(std::move(r));
  }
  events_.push_back(std::move(e));
}

void ScalarPatch::record_launch(int32_t site, const KernelInfo& k, const c10::SmallVector<uint64_t, 16>& slots,
                                const uint32_t* grid, CUstream stream) {
  Event e;
  e.site = site;
  e.launch = true;
  e.node = stream ? cuda::last_captured_node(stream) : nullptr;
  e.kernel = &k;
  e.device = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getDevice().index();
  std::copy(grid, grid + 3, e.grid);
  e.slots = slots;
  events_.push_back(std::move(e));
}

void ScalarPatch::record_read(const at::Tensor& t, bool as_float, int64_t value) {
  Event e;
  e.read = static_cast<int32_t>(reads_.size());
  events_.push_back(std::move(e));
  reads_.push_back({t, as_float, value});
}

void ScalarPatch::begin_walk(size_t at, int64_t value) {
  begin();
  walk_at_ = at;
  walk_value_ = value;
}

bool ScalarPatch::walk_read(trd_frame& f, int64_t* out) {
  if (at_ >= events_.size() || events_[at_].read < 0)
    return refuse("the program read the device elsewhere than at the capture");
  const Event& e = events_[at_++];  // reads are recorded in order: this is the next one
  if (static_cast<size_t>(e.read) < walk_at_) {
    *out = reads_[e.read].value;
    return true;
  }
  *out = walk_value_;
  walked_live_ = true;
  walk_at_ = kNoWalk;
  f.patch = nullptr;  // the rest of the run is a plain one
  return true;
}

bool ScalarPatch::holds(const at::Tensor& t) const {
  if (!t.defined() || !t.has_storage()) return false;
  const c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  for (const Event& e : events_)
    for (const Result& r : e.results)
      if (r.t.defined() && r.t.has_storage() && r.t.storage().unsafeGetStorageImpl() == s) return true;
  return false;
}

void ScalarPatch::finish(CUgraphExec exec, const std::vector<DirectResult>& direct,
                         const std::vector<std::pair<int32_t, at::Tensor>>& captured) {
  exec_ = exec;
  for (const DirectResult& d : direct) {
    auto out = std::find_if(captured.begin(), captured.end(), [&](const auto& o) { return o.first == d.slot; });
    if (out == captured.end()) continue;
    const at::Tensor& t = out->second;
    if (!t.defined() || !t.is_cuda() || t.numel() == 0 || !t.is_non_overlapping_and_dense()) continue;
    Direct r;
    r.want = address(t);
    Result* made = nullptr;  // the allocation site's recorded result
    for (size_t i = 0; i < events_.size(); ++i) {
      Event& e = events_[i];
      if (!e.launch && e.site == d.alloc_site && e.results.size() == 1) made = &e.results[0];
      for (const DirectResult::Use& u : d.uses)
        if (e.launch && e.site == u.site && u.param < e.slots.size())
          r.uses.push_back({i, u.param, e.slots[u.param] - r.want});
    }
    // Every use in the record, and the allocation's result this tensor (nothing else the record holds).
    if (!made || address(made->t) != r.want || r.uses.size() != d.uses.size()) continue;
    made->direct = static_cast<int32_t>(direct_.size());
    direct_.push_back(std::move(r));
    direct_slots_.push_back(d.slot);
  }
}

int64_t ScalarPatch::point_results(std::string* why) {
  int64_t set = 0;
  c10::SmallVector<size_t, 8> changed;  // events whose slots now differ from their node's
  for (const Direct& d : direct_)
    for (const Direct::Use& u : d.uses) {
      Event& e = events_[u.event];
      const uint64_t v = d.want + u.delta;
      if (!e.node || e.slots[u.param] == v) continue;
      e.slots[u.param] = v;
      if (std::find(changed.begin(), changed.end(), u.event) == changed.end()) changed.push_back(u.event);
    }
  for (size_t i : changed) {
    Event& e = events_[i];
    const uint32_t grid[3] = {e.grid[0], e.grid[1], e.grid[2]};
    if (!set_node(e, grid, c10::SmallVector<uint64_t, 16>(e.slots))) {
      *why = refusal_;
      refusal_.clear();
      return -1;
    }
    ++set;
  }
  return set;
}

bool ScalarPatch::set_node(Event& e, const uint32_t* grid, const c10::SmallVector<uint64_t, 16>& slots) {
  const ir::Kernel& decl = e.kernel->decl();
  c10::SmallVector<void*, 18> ptrs;
  for (const uint64_t& s : slots) ptrs.push_back(const_cast<uint64_t*>(&s));
  CUDA_KERNEL_NODE_PARAMS p{};
  p.func = static_cast<CUfunction>(e.kernel->function(e.device));
  p.gridDimX = grid[0], p.gridDimY = grid[1], p.gridDimZ = grid[2];
  p.blockDimX = 32 * decl.num_warps, p.blockDimY = 1, p.blockDimZ = 1;
  p.sharedMemBytes = decl.shared;
  p.kernelParams = ptrs.data();
  if (cuda::driver().GraphExecKernelNodeSetParams(exec_, e.node, &p) != CUDA_SUCCESS) {
    cuda::clear_runtime_error();
    return refuse("the driver refused to rewrite Triton kernel " + decl.name + "'s node");
  }
  std::copy(grid, grid + 3, e.grid);
  e.slots.assign(slots.begin(), slots.end());
  ++nodes_set_;
  return true;
}

void ScalarPatch::begin() {
  at_ = 0;
  refusal_.clear();
  nodes_set_ = 0;
  walk_at_ = kNoWalk;
  walked_live_ = false;
}

bool ScalarPatch::refuse(const std::string& why) {
  if (refusal_.empty()) refusal_ = why;
  return false;
}

ScalarPatch::Event* ScalarPatch::next(int32_t site, bool launch) {
  if (at_ >= events_.size() || events_[at_].site != site || events_[at_].launch != launch || events_[at_].read >= 0) {
    refuse("the program ran other sites than at the capture");
    return nullptr;
  }
  return &events_[at_++];
}

bool ScalarPatch::patch_call(int32_t site, const AtenSite& s, trd_frame& f, const int64_t* dyn) {
  Event* e = next(site, false);
  if (!e) return false;
  if (static_cast<size_t>(s.ndyn) != e->dyn.size() || !std::equal(e->dyn.begin(), e->dyn.end(), dyn))
    return refuse(s.name + " takes other numbers than at the capture (" + int_list(e->dyn.data(), e->dyn.size()) +
                  " -> " + int_list(dyn, static_cast<size_t>(s.ndyn)) + ")");
  for (size_t r = 0; r < s.result_slots.size(); ++r) {
    Result& res = e->results[r];
    if (res.leaf >= 0) {  // over an argument: where the argument is now (a rebind may have moved it)
      const uint64_t at = address(*f.args[res.leaf]) + res.delta;
      if (address(res.t) != at) res.t = tensor_over(res.t, at);
    }
    if (res.direct >= 0) {  // a direct result: where the replay's tensor is (never dereferenced here)
      const uint64_t at = direct_[res.direct].want;
      if (address(res.t) != at) res.t = tensor_over(res.t, at);
    }
    f.slots[s.result_slots[r]] = res.t;
  }
  return true;
}

bool ScalarPatch::patch_launch(int32_t site, const LaunchSite& s, const KernelInfo& k, trd_frame& f,
                               const uint32_t* grid, const int64_t* dyn) {
  Event* e = next(site, true);
  if (!e) return false;
  const size_t n = s.params.size();
  LaunchArgs a;
  s.fill(f, k, dyn, a);
  a.slots[n] = e->slots[n], a.slots[n + 1] = e->slots[n + 1];  // scratch: the capture's (same grid, below)
  const bool same_grid = std::equal(grid, grid + 3, e->grid);
  if (same_grid && std::equal(a.slots.begin(), a.slots.end(), e->slots.begin())) return true;
  const ir::Kernel& decl = k.decl();
  const std::string kernel = "Triton kernel " + s.name;
  if (walking()) return refuse(kernel + " takes other values than at the capture of a graph in segments");
  if (!e->node) return refuse(kernel + " launched nothing at the capture (an empty grid) or its node was not found");
  if (static_cast<uint64_t>(grid[0]) * grid[1] * grid[2] == 0) return refuse(kernel + "'s grid is empty for these values");
  if (std::string no = unpatchable(decl, !same_grid); !no.empty()) return refuse(kernel + " has " + no);
  return set_node(*e, grid, a.slots);
}

}  // namespace trident::runtime
