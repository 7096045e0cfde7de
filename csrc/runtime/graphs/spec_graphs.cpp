#include "runtime/graphs/spec_graphs.h"

#include <ATen/ops/empty_strided.h>
#include <ATen/ops/clone.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <unordered_set>

#include "runtime/aten/item_value.h"
#include "runtime/aten/tensor_over.h"
#include "runtime/launch/cuda_driver.h"
#include "runtime/graphs/graph_keys.h"
#include "runtime/graphs/graph_rebind.h"
#include "runtime/graphs/scalar_patch.h"
#include "runtime/module/env_switch.h"
#include "runtime/module/loaded_module.h"

namespace trident::runtime {
namespace {

thread_local bool t_in_capture = false;

// A capture in segments (Segments): the stream it runs on, the segments it has ended, and the values
// it assumes at its reads, in order. Set for the capture run's duration.
struct SegmentCapture {
  CUstream side = nullptr;
  const std::vector<int64_t>* assumed = nullptr;
  size_t next = 0;
  std::vector<CUgraph> ended;
};
thread_local SegmentCapture* t_segments = nullptr;

constexpr int kGraphStream = 1;  // cuda::private_stream purpose

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

std::string driver_error(CUresult r) {
  const char* name = "unknown CUDA error";
  cuda::driver().GetErrorName(r, &name);
  return name;
}

const c10::StorageImpl* storage_of(const at::Tensor& t) {
  return t.defined() && t.has_storage() ? t.storage().unsafeGetStorageImpl() : nullptr;
}

// The bytes of a dense tensor (is_non_overlapping_and_dense): one copy moves all of it.
size_t dense_bytes(const at::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

// The bytes from t's data pointer to the end of its last element (0 when it has none).
uint64_t extent_bytes(const at::Tensor& t) {
  if (t.numel() == 0) return 0;
  int64_t last = 0;
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  return static_cast<uint64_t>((last + 1) * static_cast<int64_t>(t.element_size()));
}

// The bytes each bound argument's elements span from its data pointer (k.bound order). Computed
// only where a capture or a rebind needs them, never on a replay.
c10::SmallVector<uint64_t, 32> extents_of(const SpecGraphs::Call& c, const SpecGraphs::Keyed& k) {
  c10::SmallVector<uint64_t, 32> out;
  for (int32_t leaf : k.bound) out.push_back(extent_bytes(*c.args[leaf]));
  return out;
}

// Whether the ranges [ptrs[i], ptrs[i] + extents[i]) are pairwise disjoint.
bool disjoint(const c10::SmallVector<uint64_t, 32>& ptrs, const c10::SmallVector<uint64_t, 32>& extents) {
  c10::SmallVector<std::pair<uint64_t, uint64_t>, 32> r;
  for (size_t i = 0; i < ptrs.size(); ++i) r.emplace_back(ptrs[i], ptrs[i] + extents[i]);
  std::sort(r.begin(), r.end());
  for (size_t i = 1; i < r.size(); ++i)
    if (r[i].first < r[i - 1].second) return false;
  return true;
}

// The shift of the i-th bound argument in the moved captures (graph_rebind.h): distinct, changing
// both 32-bit halves of an address, and a multiple of 64 KiB, which keeps every alignment the key holds.
uint64_t shift_of(size_t i) { return static_cast<uint64_t>(i + 1) * 0x100010000ull; }

// A result copied out by the graph itself: a copy node at the end of the graph, from the graph's
// result to where the replay's fresh tensor is (its destination patched before each launch).
struct ResultCopy {
  int32_t slot;
  CUgraphNode node;
  CUDA_MEMCPY3D params;
  at::Tensor like;  // the graph's result: the fresh tensor's sizes, strides and options
  // Where the node copies to now. A caller that drops each result gets the same block from the
  // caching allocator next call: the node then already points there and is not rewritten.
  CUdeviceptr held;
};

// A graph in segments' read (Segments): the value `r.t` holds now, as the program takes it (rt_item:
// an int64_t, or a double's bits), read on `s` after the work queued there. False with *why.
bool read_value(const ScalarPatch::Read& r, CUstream s, int64_t* out, std::string* why) {
  const at::Tensor& t = r.t;
  const auto& d = cuda::driver();
  const at::ScalarType type = t.scalar_type();
  const bool integral = type == at::kBool || type == at::kByte || type == at::kChar || type == at::kShort ||
                        type == at::kInt || type == at::kLong;
  if (integral || (r.as_float && (type == at::kFloat || type == at::kDouble))) {
    unsigned char raw[8] = {0};
    const size_t n = t.element_size();
    CUresult e = d.MemcpyDtoHAsync(raw, reinterpret_cast<CUdeviceptr>(t.data_ptr()), n, s);
    if (e == CUDA_SUCCESS) e = d.StreamSynchronize(s);
    if (e != CUDA_SUCCESS) return *why = "reading a device value between a graph's segments: " + driver_error(e), false;
    int64_t i = 0;
    double x = 0.0;
    switch (type) {
      case at::kBool: i = raw[0] != 0; break;
      case at::kByte: i = raw[0]; break;
      case at::kChar: i = static_cast<int8_t>(raw[0]); break;
      case at::kShort: { int16_t v; std::memcpy(&v, raw, 2); i = v; break; }
      case at::kInt: { int32_t v; std::memcpy(&v, raw, 4); i = v; break; }
      case at::kLong: std::memcpy(&i, raw, 8); break;
      case at::kFloat: { float v; std::memcpy(&v, raw, 4); x = v; break; }
      default: std::memcpy(&x, raw, 8); break;  // double
    }
    if (integral && r.as_float) x = static_cast<double>(i);
    if (r.as_float) std::memcpy(out, &x, sizeof x);
    else *out = i;
    return true;
  }
  try {  // other types as rt_item reads them (on the current stream, which is s)
    *out = item_value(t, r.as_float);
    return true;
  } catch (const std::exception& e) {
    *why = std::string("Tensor.item(): ") + e.what();
    return false;
  }
}

std::string read_words(bool as_float, int64_t v) {
  if (!as_float) return std::to_string(v);
  double x;
  std::memcpy(&x, &v, sizeof x);
  return std::to_string(x);
}

}  // namespace

bool in_graph_capture() { return t_in_capture; }

bool capture_host_read(trd_frame& f, const at::Tensor& t, bool as_float, int64_t* out, std::string* why) {
  SegmentCapture* cx = t_segments;
  if (!cx) return *why = "the program reads a device value on the host under stream capture", false;
  if (cx->next >= cx->assumed->size())
    return *why = "the program reads the device more often than its last plain run did", false;
  const auto& d = cuda::driver();
  CUgraph ended = nullptr;
  if (const CUresult r = d.StreamEndCapture(cx->side, &ended); r != CUDA_SUCCESS || !ended)
    return *why = "cuStreamEndCapture at a host read: " + driver_error(r), false;
  cx->ended.push_back(ended);
  *out = (*cx->assumed)[cx->next++];
  if (f.patch) f.patch->record_read(tensor_over(t, reinterpret_cast<uint64_t>(t.data_ptr())), as_float, *out);
  if (const CUresult r = d.StreamBeginCapture(cx->side, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL); r != CUDA_SUCCESS)
    return *why = "cuStreamBeginCapture after a host read: " + driver_error(r), false;
  return true;
}

struct SpecGraphs::Graph {
  Key key;
  int device = -1;
  CUgraphExec exec = nullptr;
  CUgraph graph = nullptr;               // kept while a rebind plan names its nodes
  c10::SmallVector<uint64_t, 32> bound;  // the addresses its nodes hold (Keyed::ptrs)
  std::optional<GraphRebind> rebind;
  std::optional<PoolId> pool;
  std::shared_ptr<const void> state_id;
  std::vector<std::pair<int32_t, at::Tensor>> statics;  // leaf -> the buffer the graph reads it from
  // Per copied argument: the address its nodes hold now (its buffer's, or the caller's tensor's
  // when they were patched to read it there), and how many nodes hold it (SIZE_MAX: unknown, no
  // rebind plan; 0: none reads it, so a replay neither copies nor patches it).
  c10::SmallVector<uint64_t, 32> statics_held;
  c10::SmallVector<size_t, 32> static_nodes;
  std::vector<std::pair<int32_t, at::Tensor>> outputs;  // frame slot -> the graph's result
  std::vector<ResultCopy> copies;  // results the graph copies out itself
  std::vector<at::Tensor> capture_targets;  // where the capture's copy nodes wrote (until patched)
  std::vector<int64_t> out_ints;
  // Scalar patches (scalar_patch.h): the capture's record, null where the spec has no scalars that
  // may differ; the scalars the nodes hold now, and whether a patch has rewritten any node.
  std::unique_ptr<ScalarPatch> patch;
  c10::SmallVector<int64_t, 8> scalars;
  bool patched = false;  // a patch or a direct result's pointing has rewritten a node
  // A graph in segments (Segments): per host read, the segment it ends (graph, executable), in
  // order; the last stretch is graph/exec. The reads themselves are the patch record's.
  std::vector<std::pair<CUgraph, CUgraphExec>> segments;

  const at::Tensor& output(int32_t slot) const {
    return std::find_if(outputs.begin(), outputs.end(), [&](const auto& o) { return o.first == slot; })->second;
  }

  ~Graph() {
    patch.reset();  // its tensors own nothing; before the pool goes
    // An executable graph still running is freed when it completes (cuGraphExecDestroy); its pool's
    // blocks go back to PyTorch after the tensors over them.
    if (exec) cuda::driver().GraphExecDestroy(exec);
    if (graph) cuda::driver().GraphDestroy(graph);
    for (auto& [sg, sx] : segments) {
      if (sx) cuda::driver().GraphExecDestroy(sx);
      if (sg) cuda::driver().GraphDestroy(sg);
    }
    copies.clear();
    capture_targets.clear();
    outputs.clear();
    statics.clear();
    if (pool)
      if (const PrivatePoolApi* api = private_pool_api()) api->release(device, *pool);
  }
};

int64_t SpecGraphs::byte_limit() {
  static const int64_t bytes = env_bytes("TRIDENT_GRAPH_BYTES", kDefaultByteLimit);
  return bytes;
}

bool SpecGraphs::direct_results_on() { return env_switch_on("TRIDENT_GRAPH_DIRECT_RESULTS"); }

bool SpecGraphs::segments_on() { return env_switch_on("TRIDENT_GRAPH_SEGMENTS"); }

SpecGraphs::SpecGraphs(std::vector<int32_t> writes, std::string graph_off, int32_t result_kind, std::string scalars_keyed,
                       std::vector<DirectResult> direct, const std::string& host_read, bool branches)
    : writes_(std::move(writes)), result_kind_(result_kind), scalars_keyed_(std::move(scalars_keyed)) {
  if (!host_read.empty() && graph_off.empty()) {
    if (branches) graph_off = host_read + ", and branches on data";
    else if (!segments_on()) graph_off = host_read + " (TRIDENT_GRAPH_SEGMENTS=0 keeps its graphs whole, so off)";
    else segmented_at_ = host_read;
  }
  if (!segmented_at_.empty()) {
    // What a replay launches past a read must be what the program issues: keyed by its scalars, and
    // (capture) by its arguments' addresses, no direct results.
    if (scalars_keyed_.empty()) scalars_keyed_ = "its graphs are split at host reads (" + host_read + ")";
  } else if (direct_results_on()) {
    direct_ = std::move(direct);
  }
  if (!graph_off.empty()) stop(graph_off);
}
SpecGraphs::~SpecGraphs() = default;

GraphStats SpecGraphs::stats() const {
  GraphStats s;
  s.graphs = static_cast<int64_t>(graphs_.size());
  s.captures = captures_;
  s.replays = replays_;
  s.rebinds = rebinds_;
  s.patches = patches_;
  s.scalar_patches = scalar_patches_;
  s.patched_nodes = patched_nodes_;
  s.result_nodes = result_nodes_;
  for (const auto& g : graphs_) s.segments += static_cast<int64_t>(g->segments.size());
  s.read_misses = read_misses_;
  return s;
}

void SpecGraphs::stop(const std::string& why) {
  stopped_ = true;
  why_ = why;
  graphs_.clear();
}

void SpecGraphs::key_scalars(const std::string& why) {
  scalars_keyed_ = why;
  graphs_.clear();  // keyed without their scalars
  recent_.clear();
}

bool SpecGraphs::key_of(const Call& c, Keyed& kd) const {
  // No CUDA in this torch, or no device (a CUDA build on a machine without one): no graphs to ask
  // for. Asked once per process, not per call.
  static const bool cuda_here = c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA) &&
                                c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->deviceCount() > 0;
  if (stopped_ || !cuda_here) return false;
  const auto* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  const int dev = impl->getDevice().index();
  Key& key = kd.key;
  c10::SmallVector<bool, 32>& copied = kd.copied;
  kd.bound.clear(), kd.ptrs.clear(), kd.scalars.clear();
  const bool values = !scalars_keyed_.empty();
  key.clear();
  copied.assign(static_cast<size_t>(c.nleaves), false);
  for (int32_t k = 0; k < c.nleaves; ++k) {
    const trd_leaf& l = c.leaves[k];
    if (l.kind == TRD_TENSOR) {
      const at::Tensor* t = c.args[k];
      if (!t || !t->is_cuda() || t->get_device() != dev || t->layout() != c10::kStrided) return false;
      const bool written = std::binary_search(writes_.begin(), writes_.end(), k);
      copied[k] = !written && t->is_non_overlapping_and_dense() && dense_bytes(*t) <= kCopyBytes;
      if (!copied[k]) {
        kd.bound.push_back(k);
        kd.ptrs.push_back(l.data_ptr);
      }
    }
    if (l.kind == TRD_INT || l.kind == TRD_BOOL) kd.scalars.push_back(l.ival);
    if (l.kind == TRD_FLOAT) {
      int64_t bits;
      std::memcpy(&bits, &l.fval, sizeof bits);
      kd.scalars.push_back(bits);
    }
    append_leaf_key(key, l, copied[k], kAlignBits, values);
  }
  for (int32_t k = 0; k < c.nstate; ++k)
    if (!c.state[k].is_cuda() || c.state[k].get_device() != dev) return false;
  const auto& d = cuda::driver();
  CUstream st = cuda::current_stream(dev);
  CUstreamCaptureStatus capturing = CU_STREAM_CAPTURE_STATUS_NONE;
  if (!d.graph_api() || d.StreamIsCapturing(st, &capturing) != CUDA_SUCCESS ||
      capturing != CU_STREAM_CAPTURE_STATUS_NONE)
    return false;  // a caller's own capture takes the program as it runs
  key.push_back(dev);
  key.push_back(reinterpret_cast<int64_t>(st));
  key.push_back(reinterpret_cast<int64_t>(c.state_id.get()));
  kd.device = dev;
  kd.stream = st;
  return true;
}

at::Tensor SpecGraphs::result(const Call& c, int32_t slot, const at::Tensor& like) {
  if (!c.recycle) return at::empty_strided(like.sizes(), like.strides(), like.options());
  auto [it, added] = result_sites_.try_emplace(slot);
  ReusePool::Site& site = it->second;
  if (added) site.kind = result_kind_;
  ReusePool::Key key(like.sizes().begin(), like.sizes().end());
  key.append(like.strides().begin(), like.strides().end());
  key.push_back(static_cast<int64_t>(like.scalar_type()));
  key.push_back(like.get_device());
  if (at::Tensor* kept = c.recycle->take(site, key)) return *kept;
  at::Tensor t = at::empty_strided(like.sizes(), like.strides(), like.options());
  c.recycle->keep(site, t, std::move(key));
  return t;
}

std::string SpecGraphs::launch(Graph& g, const Call& c, const Keyed& k, trd_frame& f, int64_t* out_ints, bool rebound,
                               Outcome* o) {
  const auto& d = cuda::driver();
  auto s = static_cast<CUstream>(k.stream);
  // A copied argument is read where the caller has it when few nodes hold its buffer's address and
  // the caller's address is aligned as the buffer's (the nodes are patched, no copy); else it is
  // copied into the buffer, and nodes patched to read elsewhere before are pointed back at it.
  c10::SmallVector<uint64_t, 32> want(g.bound.begin(), g.bound.end()), held(g.bound.begin(), g.bound.end());
  for (size_t j = 0; j < g.statics.size(); ++j) {
    const auto& [k, buf] = g.statics[j];
    const auto theirs = reinterpret_cast<uint64_t>(c.args[k]->data_ptr());
    const auto mine = reinterpret_cast<uint64_t>(buf.data_ptr());
    held.push_back(g.statics_held[j]);
    const CopiedArgument what = copied_argument(g.static_nodes[j], theirs, mine, kPatchNodes, kAlignBits);
    want.push_back(what == CopiedArgument::kNothing ? g.statics_held[j] : what == CopiedArgument::kPointAt ? theirs : mine);
    if (what != CopiedArgument::kCopyIn) continue;
    const CUresult r = d.MemcpyDtoDAsync(mine, theirs, dense_bytes(buf), s);
    if (r != CUDA_SUCCESS) return "copying an argument into the graph's buffer: " + driver_error(r);
  }
  if (g.rebind && want != held) {
    if (const CUresult r = g.rebind->apply(g.exec, want.data(), held.data()); r != CUDA_SUCCESS)
      return "pointing a graph at an argument: " + driver_error(r);
    std::copy(want.begin() + g.bound.size(), want.end(), g.statics_held.begin());
    ++patches_;
    rebound = true;
  }
  // Results the graph writes directly: their tensors first, so that a patch computes its launches'
  // pointers at them; then the nodes still writing elsewhere are pointed there.
  const std::vector<int32_t> no_direct;
  const std::vector<int32_t>& direct = g.patch ? g.patch->direct_slots() : no_direct;
  c10::SmallVector<at::Tensor, 4> direct_out;
  for (size_t i = 0; i < direct.size(); ++i) {
    direct_out.push_back(result(c, direct[i], g.output(direct[i])));
    g.patch->want(i, reinterpret_cast<uint64_t>(direct_out.back().data_ptr()));
  }
  // After a rebind the nodes it rewrote hold the capture's words moved, which the patch's record does
  // not know: a patch run rewrites them from this call's values, where a node was rewritten before
  // (a patch, a pointing) or is about to be (point_results() rewrites a node from the record's
  // slots, which would put back the capture's argument addresses).
  if (k.scalars != g.scalars || (rebound && (g.patched || !direct.empty()))) {
    o->patch_why = patch(g, c, k, want, f, &o->refused);
    if (!o->patch_why.empty()) return {};
  }
  if (!g.segments.empty()) {
    if (std::string error = launch_segments(g, c, k, f, out_ints, o); !error.empty() || o->live || o->failed) return error;
  }
  if (!direct.empty()) {
    std::string why;
    const int64_t n = g.patch->point_results(&why);
    if (n < 0) return "pointing a graph's kernels at a fresh result: " + why;
    if (n > 0) g.patched = true, result_nodes_ += n;
    for (size_t i = 0; i < direct.size(); ++i) f.slots[direct[i]] = std::move(direct_out[i]);
  }
  CUcontext ctx = nullptr;
  for (ResultCopy& oc : g.copies) {
    at::Tensor out = result(c, oc.slot, oc.like);
    CUDA_MEMCPY3D p = oc.params;
    p.dstDevice = reinterpret_cast<CUdeviceptr>(out.data_ptr());
    if (p.dstDevice != oc.held) {
      CUresult r = ctx ? CUDA_SUCCESS : d.CtxGetCurrent(&ctx);
      if (r == CUDA_SUCCESS) r = d.GraphExecMemcpyNodeSetParams(g.exec, oc.node, &p, ctx);
      if (r != CUDA_SUCCESS) return "pointing a graph's result copy at a fresh tensor: " + driver_error(r);
      oc.held = p.dstDevice;
    }
    f.slots[oc.slot] = std::move(out);
  }
  if (const CUresult r = d.GraphLaunch(g.exec, s); r != CUDA_SUCCESS)
    return "cuGraphLaunch: " + driver_error(r);
  for (const auto& [slot, t] : g.outputs) {
    if (f.slots[slot].defined()) continue;  // copied by the graph
    if (!t.is_non_overlapping_and_dense()) {
      f.slots[slot] = at::clone(t);
      continue;
    }
    at::Tensor out = result(c, slot, t);
    if (const size_t n = dense_bytes(t); n > 0) {
      const CUresult r = d.MemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(out.data_ptr()),
                                           reinterpret_cast<CUdeviceptr>(t.data_ptr()), n, s);
      if (r != CUDA_SUCCESS) return "copying a result out of the graph: " + driver_error(r);
    }
    f.slots[slot] = std::move(out);
  }
  std::copy(g.out_ints.begin(), g.out_ints.end(), out_ints);
  ++replays_;
  return {};
}

bool SpecGraphs::launched(const std::string& error) {
  if (error.empty()) return true;
  stop(error);
  return false;
}

bool SpecGraphs::replay(const Call& c, const Keyed& k, trd_frame& f, int64_t* out_ints) {
  auto found = graphs_.end(), movable = graphs_.end();
  bool rebound = false;
  for (auto it = graphs_.begin(); it != graphs_.end(); ++it) {
    if ((*it)->key != k.key) continue;
    if ((*it)->bound == k.ptrs) {
      found = it;
      break;
    }
    if ((*it)->rebind && movable == graphs_.end()) movable = it;
  }
  if (found == graphs_.end()) {
    // Another graph of this key whose addresses can be rewritten: rebind it to the call's, when the
    // call's arguments do not overlap (the capture's did not).
    if (movable == graphs_.end() || !disjoint(k.ptrs, extents_of(c, k))) return false;
    Graph& g = **movable;
    c10::SmallVector<uint64_t, 32> want(k.ptrs.begin(), k.ptrs.end()), held(g.bound.begin(), g.bound.end());
    want.append(g.statics_held.begin(), g.statics_held.end());
    held.append(g.statics_held.begin(), g.statics_held.end());
    if (const CUresult r = g.rebind->apply(g.exec, want.data(), held.data()); r != CUDA_SUCCESS) {
      // Some nodes may hold the new addresses and some the old: the graph is no longer one to launch.
      bind_why_ = "rebinding a graph failed (" + driver_error(r) + "); its key captures again";
      graphs_.erase(movable);
      cuda::clear_runtime_error();
      return false;
    }
    g.bound = k.ptrs;
    ++rebinds_;
    found = movable;
    rebound = true;
  }
  graphs_.splice(graphs_.begin(), graphs_, found);  // most recently replayed first
  return replay_front(c, k, f, out_ints, rebound);
}

bool SpecGraphs::replay_front(const Call& c, const Keyed& k, trd_frame& f, int64_t* out_ints, bool rebound) {
  Outcome o;
  const std::string error = launch(*graphs_.front(), c, k, f, out_ints, rebound, &o);
  if (o.failed || o.live) {
    // The live run's kernels may still read the graph's memory: they end before the pool goes.
    cuda::driver().StreamSynchronize(static_cast<CUstream>(k.stream));
    graphs_.pop_front();
    if (o.failed) return false;  // f.error: the call fails
    if (++read_misses_ >= kReadMisses)
      stop(segmented_at_ + ": its value differed from the one its graph was captured with in " +
           std::to_string(read_misses_) + " calls (last " + read_miss_ + ")");
    return true;
  }
  if (o.patch_why.empty()) return launched(error);
  graphs_.pop_front();  // half patched
  if (o.refused) key_scalars(o.patch_why);
  return false;
}

c10::SmallVector<const at::Tensor*, 32> SpecGraphs::patch_args(const Graph& g, const Call& c,
                                                               const c10::SmallVector<uint64_t, 32>* want) const {
  c10::SmallVector<const at::Tensor*, 32> args(c.args, c.args + c.nleaves);
  for (size_t j = 0; j < g.statics.size(); ++j) {
    const auto& [leaf, buf] = g.statics[j];
    if (!want || g.static_nodes[j] == 0 || (*want)[g.bound.size() + j] == reinterpret_cast<uint64_t>(buf.data_ptr()))
      args[leaf] = &buf;
  }
  return args;
}

std::string SpecGraphs::launch_segments(Graph& g, const Call& c, const Keyed& k, trd_frame& f, int64_t* out_ints,
                                        Outcome* o) {
  const auto& d = cuda::driver();
  auto s = static_cast<CUstream>(k.stream);
  const std::vector<ScalarPatch::Read>& reads = g.patch->reads();
  for (size_t i = 0; i < g.segments.size(); ++i) {
    if (const CUresult r = d.GraphLaunch(g.segments[i].second, s); r != CUDA_SUCCESS) {
      if (i == 0) return "cuGraphLaunch: " + driver_error(r);  // nothing of the program ran
      f.error = "cuGraphLaunch of a graph's segment " + std::to_string(i) + ": " + driver_error(r);
      o->failed = true;
      return {};
    }
    int64_t v = 0;
    if (std::string why; !read_value(reads[i], s, &v, &why)) {
      f.error = why;
      o->failed = true;
      return {};
    }
    if (v == reads[i].value) continue;
    read_miss_ = read_words(reads[i].as_float, reads[i].value) + " -> " + read_words(reads[i].as_float, v);
    live_from(g, c, f, out_ints, i, v, o);
    return {};
  }
  return {};
}

void SpecGraphs::live_from(Graph& g, const Call& c, trd_frame& f, int64_t* out_ints, size_t read, int64_t value,
                           Outcome* o) {
  c10::SmallVector<const at::Tensor*, 32> args = patch_args(g, c, nullptr);
  const at::Tensor* const* caller_args = f.args;
  f.args = args.data();
  f.patch = g.patch.get();
  g.patch->begin_walk(read, value);
  const int32_t nout = c.mod->num_out_ints(c.spec);
  c10::SmallVector<int64_t, 16> ints(static_cast<size_t>(std::max(nout, 1)));
  const bool ran = c.mod->run(c.spec, f, c.leaves, ints.data());
  f.patch = nullptr;
  f.args = caller_args;
  o->failed = true;
  if (!g.patch->walked_live()) {  // the walk stopped before the read: nothing new ran
    const std::string why = g.patch->refusal().empty() ? first_line(f.error) : g.patch->refusal();
    f.error = "trident internal error: a graph in segments could not go on from its host read: " + why;
    f.error_kind = trd_frame::ErrorKind::kRuntime;
  }
  if (!g.patch->walked_live() || !ran) return;  // else the program failed after the read (f.error), as eager would
  // Results over the graph's memory (made before the read) are copied: the next replay overwrites it.
  for (int32_t slot = 0; slot < c.mod->num_slots(c.spec); ++slot)
    if (g.patch->holds(f.slots[slot])) f.slots[slot] = at::clone(f.slots[slot]);
  std::copy(ints.begin(), ints.begin() + nout, out_ints);
  o->failed = false;
  o->live = true;
}

std::string SpecGraphs::patch(Graph& g, const Call& c, const Keyed& k, const c10::SmallVector<uint64_t, 32>& want,
                              trd_frame& f, bool* refused) {
  if (!g.patch || !c.mod) return *refused = true, "the capture recorded no sites to patch";
  // The arguments where the nodes hold them.
  c10::SmallVector<const at::Tensor*, 32> args = patch_args(g, c, &want);
  const at::Tensor* const* caller_args = f.args;
  f.args = args.data();
  f.patch = g.patch.get();
  g.patch->begin();
  c10::SmallVector<int64_t, 16> ints(static_cast<size_t>(std::max(c.mod->num_out_ints(c.spec), 1)));
  const bool ran = c.mod->run(c.spec, f, c.leaves, ints.data());
  f.patch = nullptr;
  f.args = caller_args;
  for (int32_t s = 0; s < c.mod->num_slots(c.spec); ++s) f.slots[s].reset();
  std::string why = g.patch->refusal();
  if (ran && g.patch->complete()) {
    g.out_ints.assign(ints.begin(), ints.begin() + c.mod->num_out_ints(c.spec));
    if (k.scalars != g.scalars) ++scalar_patches_;  // not a run after a rebind alone (graph_scalar_patches)
    g.scalars = k.scalars;
    g.patched = g.patched || g.patch->nodes_set() > 0;
    patched_nodes_ += g.patch->nodes_set();
    return {};
  }
  *refused = ran || !why.empty();
  if (why.empty()) why = ran ? "the program ran fewer sites than at the capture" : first_line(f.error);
  f.error.clear();
  f.error_kind = trd_frame::ErrorKind::kRuntime;
  return why;
}

bool SpecGraphs::should_capture(const Keyed& k) {
  // The reads of the plain run before this call are what a capture now assumes; this call's, if it
  // runs plainly, are noted afresh.
  assumed_ = std::move(noted_);
  noted_.clear();
  Key full = k.key;  // keyed by addresses too: a graph that could not rebind serves its own only
  for (uint64_t p : k.ptrs) full.push_back(static_cast<int64_t>(p));
  auto it = std::find_if(recent_.begin(), recent_.end(), [&](const auto& e) { return e.first == full; });
  if (it == recent_.end()) {
    recent_.emplace_front(std::move(full), 0);
    if (recent_.size() > kRecentKeys) recent_.pop_back();
    it = recent_.begin();
  }
  if (++it->second < kRepeats) return false;
  recent_.erase(it);
  return true;
}

namespace {

// Runs the program under stream capture on `side`, then copies each dense result but the direct
// ones into a buffer of the capture's own (the copy nodes a replay points at its fresh tensors:
// `targets`, per result slot); the graph in *graph, or the error.
std::string run_captured(const LoadedModule& mod, int32_t spec, trd_frame& f, const trd_leaf* leaves,
                         int64_t* out_ints, int device, CUstream side, CUgraph* graph,
                         std::vector<std::pair<int32_t, at::Tensor>>* targets, const std::vector<DirectResult>& direct) {
  const auto& d = cuda::driver();
  bool ran = false;
  CUresult began, ended = CUDA_SUCCESS, copied = CUDA_SUCCESS;
  {
    cuda::CurrentStreamIs on_side(device, side);
    began = d.StreamBeginCapture(side, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    if (began == CUDA_SUCCESS) {
      t_in_capture = true;
      ran = mod.run(spec, f, leaves, out_ints);
      t_in_capture = false;
      for (int32_t s = 0; ran && copied == CUDA_SUCCESS && s < mod.num_slots(spec); ++s) {
        const at::Tensor& t = f.slots[s];
        if (!t.defined() || !t.is_cuda() || t.numel() == 0 || !t.is_non_overlapping_and_dense()) continue;
        if (std::any_of(direct.begin(), direct.end(), [&](const DirectResult& d) { return d.slot == s; })) continue;
        at::Tensor to = at::empty_strided(t.sizes(), t.strides(), t.options());
        copied = d.MemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(to.data_ptr()),
                                   reinterpret_cast<CUdeviceptr>(t.data_ptr()), dense_bytes(t), side);
        targets->emplace_back(s, std::move(to));
      }
      ended = d.StreamEndCapture(side, graph);
    }
  }
  if (began != CUDA_SUCCESS) return "cuStreamBeginCapture: " + driver_error(began);
  if (!ran) return "the program failed under stream capture: " + first_line(f.error);
  if (copied != CUDA_SUCCESS) return "copying a result under stream capture: " + driver_error(copied);
  if (ended != CUDA_SUCCESS || !*graph) return "cuStreamEndCapture: " + driver_error(ended);
  return {};
}

// The copy nodes of `graph` that copy each result of `outputs` to its target (run_captured), in
// `copies`; a result whose node is not found is left to the host's copy after the launch.
std::string find_result_copies(CUgraph graph, const std::vector<std::pair<int32_t, at::Tensor>>& outputs,
                               const std::vector<std::pair<int32_t, at::Tensor>>& targets,
                               std::vector<ResultCopy>* copies) {
  const auto& d = cuda::driver();
  size_t n = 0;
  if (d.GraphGetNodes(graph, nullptr, &n) != CUDA_SUCCESS) return "cuGraphGetNodes failed";
  std::vector<CUgraphNode> nodes(n);
  if (d.GraphGetNodes(graph, nodes.data(), &n) != CUDA_SUCCESS) return "cuGraphGetNodes failed";
  for (CUgraphNode node : nodes) {
    CUgraphNodeType type;
    CUDA_MEMCPY3D p{};
    if (d.GraphNodeGetType(node, &type) != CUDA_SUCCESS || type != CU_GRAPH_NODE_TYPE_MEMCPY ||
        d.GraphMemcpyNodeGetParams(node, &p) != CUDA_SUCCESS || p.dstMemoryType != CU_MEMORYTYPE_DEVICE)
      continue;
    for (const auto& [slot, to] : targets) {
      if (p.dstDevice != reinterpret_cast<CUdeviceptr>(to.data_ptr())) continue;
      auto out = std::find_if(outputs.begin(), outputs.end(), [&, slot = slot](const auto& o) { return o.first == slot; });
      if (out != outputs.end() && p.srcDevice == reinterpret_cast<CUdeviceptr>(out->second.data_ptr()))
        copies->push_back({slot, node, p, out->second, p.dstDevice});
    }
  }
  return {};
}

// Drops what a failed or discarded capture left: its graph, the frame's error, CUDA's last error.
void discard(CUgraph* graph, trd_frame& f) {
  if (*graph) cuda::driver().GraphDestroy(*graph), *graph = nullptr;
  cuda::clear_runtime_error();
  f.error.clear();
  f.error_kind = trd_frame::ErrorKind::kRuntime;
}

// Runs the program under capture with each rebindable argument (`movable`: the bound leaves, then
// the copied ones, whose tensors in `args` are the graph's buffers) moved by `times` times its
// shift (graph_rebind.h), the other arguments as `args` has them, its results copied out as the
// first capture's (no copy node for a `direct` one: the plan compares the captures node by node);
// the graph in *out, or the error. The frame's slots are emptied after.
std::string capture_moved(const LoadedModule& mod, int32_t spec, const SpecGraphs::Call& c, const SpecGraphs::Keyed& k,
                          const c10::SmallVector<const at::Tensor*, 32>& args,
                          const c10::SmallVector<int32_t, 32>& movable, uint64_t times, trd_frame& f, CUstream side,
                          int32_t nout_ints, const std::vector<DirectResult>& direct, CUgraph* out) {
  c10::SmallVector<trd_leaf, 32> leaves(c.leaves, c.leaves + c.nleaves);
  std::vector<at::Tensor> fakes;
  fakes.reserve(movable.size());
  c10::SmallVector<const at::Tensor*, 32> moved(args.begin(), args.end());
  for (size_t j = 0; j < movable.size(); ++j) {
    const int32_t leaf = movable[j];
    const at::Tensor& t = *args[leaf];
    const uint64_t shift = times * shift_of(j);
    leaves[leaf].data_ptr += shift;
    // Never dereferenced: nothing runs under capture.
    fakes.push_back(tensor_over(t, reinterpret_cast<uint64_t>(t.data_ptr()) + shift));
    moved[leaf] = &fakes.back();
  }
  const at::Tensor* const* before = f.args;
  f.args = moved.data();
  c10::SmallVector<int64_t, 16> ints(static_cast<size_t>(std::max(nout_ints, 1)));  // discarded
  std::vector<std::pair<int32_t, at::Tensor>> targets;  // discarded with the graph's other memory
  const std::string why = run_captured(mod, spec, f, leaves.data(), ints.data(), k.device, side, out, &targets, direct);
  for (int32_t s = 0; s < mod.num_slots(spec); ++s) f.slots[s].reset();
  f.args = before;
  return why;
}

}  // namespace

bool SpecGraphs::capture(const LoadedModule& mod, int32_t spec, const Call& c, const Keyed& k, trd_frame& f,
                         int64_t* out_ints, int32_t nout_ints) {
  const PrivatePoolApi* api = private_pool_api();
  if (!api) return stop("no private memory pool API (trident._compat.private_pool_api)"), false;
  const bool segmented = !segmented_at_.empty();
  if (segmented && !cuda::driver().segments_api()) return stop("the CUDA driver lacks what graphs in segments need"), false;
  auto g = std::make_unique<Graph>();
  g->key = k.key;
  g->device = k.device;
  const c10::SmallVector<bool, 32>& copied = k.copied;
  CUstream side = cuda::private_stream(kGraphStream);
  if (!side) return stop("no private CUDA stream to capture on"), false;

  // The copied arguments' buffers, made on the caller's stream, where every replay copies into them.
  c10::SmallVector<const at::Tensor*, 32> args(c.args, c.args + c.nleaves);
  g->statics.reserve(static_cast<size_t>(std::count(copied.begin(), copied.end(), true)));
  for (int32_t k = 0; k < c.nleaves; ++k) {
    if (!copied[k]) continue;
    const at::Tensor& t = *c.args[k];
    g->statics.emplace_back(k, at::empty_strided(t.sizes(), t.strides(), t.options()));
    args[k] = &g->statics.back().second;
  }

  PoolId pool{};
  if (!api->begin(g->device, side, &pool)) return stop("PyTorch refused to route allocations to a private pool"), false;
  g->pool = pool;
  const at::Tensor* const* caller_args = f.args;
  const bool caller_keeps = f.keeps_buffers;
  f.args = args.data();
  f.keeps_buffers = false;  // module-kept buffers are memory other runs use: the graph's are its pool's
  // Scalars that may differ from call to call, or results written directly: the capture run records
  // its sites for patches and pointings.
  if ((scalars_keyed_.empty() && !k.scalars.empty()) || !direct_.empty() || segmented)
    g->patch = std::make_unique<ScalarPatch>();
  g->scalars = k.scalars;
  f.patch = g->patch.get();
  CUgraph graph = nullptr;
  std::vector<std::pair<int32_t, at::Tensor>> targets;
  SegmentCapture segments;
  segments.side = side;
  segments.assumed = &assumed_;
  if (segmented) t_segments = &segments;
  std::string why = run_captured(mod, spec, f, c.leaves, out_ints, g->device, side, &graph, &targets, direct_);
  t_segments = nullptr;
  f.patch = nullptr;
  // The segments before each read: instantiated, or dropped with the capture.
  for (CUgraph sg : segments.ended) {
    CUgraphExec sx = nullptr;
    if (why.empty())
      if (const CUresult r = cuda::driver().GraphInstantiateWithFlags(&sx, sg, 0); r != CUDA_SUCCESS)
        why = "cuGraphInstantiate of a segment: " + driver_error(r), sx = nullptr;
    g->segments.emplace_back(sg, sx);
  }
  if (why.empty() && segmented && g->patch->reads().size() != g->segments.size())
    why = "the capture's host reads and segments do not pair up";
  const int32_t nslots = mod.num_slots(spec);
  for (int32_t s = 0; s < nslots; ++s)
    if (f.slots[s].defined()) g->outputs.emplace_back(s, std::move(f.slots[s]));
  // The same program twice more with the bound arguments and the copied arguments' buffers moved,
  // for the rebind plan (graph_rebind.h): the bound ones first, in k.bound's order.
  std::vector<RebindArg> moved_args;
  c10::SmallVector<int32_t, 32> movable(k.bound.begin(), k.bound.end());
  for (const auto& [leaf, buf] : g->statics) movable.push_back(leaf);
  CUgraph moved[2] = {nullptr, nullptr};
  std::string bind_why;  // why this graph will not rebind
  if (why.empty() && !movable.empty()) {
    const c10::SmallVector<uint64_t, 32> extents = extents_of(c, k);
    if (segmented) {
      bind_why = "its graphs are split at host reads, which a rebind does not follow";
    } else if (!disjoint(k.ptrs, extents)) {
      bind_why = "its tensor arguments overlap";
    } else if (!api->segments) {
      bind_why = "no way to read the private pool's segments (trident._compat.private_pool_api)";
    } else {
      for (size_t j = 0; j < k.bound.size(); ++j) moved_args.push_back({k.ptrs[j], extents[j], shift_of(j)});
      for (const auto& [leaf, buf] : g->statics)
        moved_args.push_back({reinterpret_cast<uint64_t>(buf.data_ptr()), extent_bytes(buf), shift_of(moved_args.size())});
      for (uint64_t times = 1; times <= 2 && bind_why.empty(); ++times) {
        CUgraph& m = moved[times - 1];
        if (std::string no = capture_moved(mod, spec, c, k, args, movable, times, f, side, nout_ints, direct_, &m); !no.empty()) {
          bind_why = "the program with its arguments moved: " + no;
          discard(&m, f);
        }
      }
    }
  }
  api->end(g->device, pool);
  f.args = caller_args;
  f.keeps_buffers = caller_keeps;

  if (why.empty()) {
    // Results are copied out after each replay: one sharing memory with anything the caller or the
    // module holds, or with another result, could not be.
    std::unordered_set<const c10::StorageImpl*> held;
    for (int32_t k = 0; k < c.nleaves; ++k)
      if (c.args[k]) held.insert(storage_of(*c.args[k]));
    for (const auto& [k, buf] : g->statics) held.insert(storage_of(buf));
    for (int32_t k = 0; k < c.nstate; ++k) held.insert(storage_of(c.state[k]));
    for (const auto& [slot, t] : g->outputs) {
      const c10::StorageImpl* s = storage_of(t);
      if (!t.is_cuda() || !s) why = "a result is not a CUDA tensor";
      else if (!held.insert(s).second) why = "a result shares memory with an argument, module state or another result";
      if (!why.empty()) break;
    }
  }
  if (why.empty()) {
    if (const CUresult r = cuda::driver().GraphInstantiateWithFlags(&g->exec, graph, 0); r != CUDA_SUCCESS)
      why = "cuGraphInstantiate: " + driver_error(r), g->exec = nullptr;
  }
  if (why.empty() && api->segments) {
    uint64_t held = 0;
    for (const auto& [begin, end] : api->segments(g->device, pool)) held += end - begin;
    if (held > static_cast<uint64_t>(byte_limit()))
      why = "a graph of it would hold " + std::to_string(held >> 20) + " MiB of its own memory, over TRIDENT_GRAPH_BYTES (" +
            std::to_string(byte_limit() >> 20) + " MiB)";
  }
  if (why.empty() && moved[0] && moved[1]) {
    const AddressRanges segments = api->segments(g->device, pool);
    std::string plan_why;
    g->rebind = GraphRebind::plan(graph, moved[0], moved[1], moved_args, segments, &plan_why);
    if (!g->rebind) bind_why = plan_why;
  }
  for (CUgraph m : moved)
    if (m) cuda::driver().GraphDestroy(m);
  if (why.empty()) {
    if (std::string no = find_result_copies(graph, g->outputs, targets, &g->copies); !no.empty()) why = no;
    for (auto& [slot, to] : targets) g->capture_targets.push_back(std::move(to));
    for (size_t j = 0; j < g->statics.size(); ++j) {
      g->statics_held.push_back(reinterpret_cast<uint64_t>(g->statics[j].second.data_ptr()));
      g->static_nodes.push_back(g->rebind ? g->rebind->nodes_holding(static_cast<uint32_t>(k.bound.size() + j))
                                          : SIZE_MAX);
    }
  }
  if (why.empty() && g->patch) g->patch->finish(g->exec, direct_, g->outputs);
  if (g->rebind || !g->copies.empty() || g->patch) g->graph = graph;  // the plan, copies and patches name its nodes
  else if (graph) cuda::driver().GraphDestroy(graph);
  graph = nullptr;
  if (!why.empty()) {
    discard(&graph, f);
    g.reset();
    stop(why);
    return false;
  }
  if (!graphs_.empty()) {  // a capture beside a graph the spec holds: note why (explain)
    const Key& was = graphs_.front()->key;
    std::string why_new = key_change(c.nleaves, was.data(), was.size(), k.key.data(), k.key.size(), !scalars_keyed_.empty());
    if (why_new.empty()) why_new = "new argument addresses (graphs keyed by address)";
    const std::string what = why_new.substr(0, why_new.find(": "));
    auto r = std::find_if(recaptures_.begin(), recaptures_.end(), [&](const Recapture& x) { return x.what == what; });
    if (r == recaptures_.end() && recaptures_.size() < kRecaptureKinds) r = recaptures_.insert(recaptures_.end(), {what, "", 0});
    if (r != recaptures_.end()) r->last = why_new, ++r->count;
  }
  bind_why_ = k.bound.empty() ? std::string() : bind_why;  // copied arguments alone: copied, never keyed
  g->bound = k.ptrs;
  g->out_ints.assign(out_ints, out_ints + nout_ints);
  g->state_id = c.state_id;
  ++captures_;
  graphs_.push_front(std::move(g));
  if (static_cast<int>(graphs_.size()) > kMaxGraphs) graphs_.pop_back();
  return replay_front(c, k, f, out_ints, false);
}

}  // namespace trident::runtime
