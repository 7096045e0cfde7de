#include "runtime/graphs/spec_graphs.h"

#include <ATen/ops/empty_strided.h>
#include <ATen/ops/clone.h>
#include <ATen/ops/from_blob.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <unordered_set>

#include "runtime/launch/cuda_driver.h"
#include "runtime/graphs/graph_rebind.h"
#include "runtime/module/loaded_module.h"

namespace trident::runtime {
namespace {

thread_local bool t_in_capture = false;

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

}  // namespace

bool in_graph_capture() { return t_in_capture; }

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
  std::vector<std::pair<int32_t, at::Tensor>> outputs;  // frame slot -> the graph's result
  std::vector<int64_t> out_ints;

  ~Graph() {
    // An executable graph still running is freed when it completes (cuGraphExecDestroy); its pool's
    // blocks go back to PyTorch after the tensors over them.
    if (exec) cuda::driver().GraphExecDestroy(exec);
    if (graph) cuda::driver().GraphDestroy(graph);
    outputs.clear();
    statics.clear();
    if (pool)
      if (const PrivatePoolApi* api = private_pool_api()) api->release(device, *pool);
  }
};

SpecGraphs::SpecGraphs(std::vector<int32_t> writes, std::string graph_off) : writes_(std::move(writes)) {
  if (!graph_off.empty()) stop(graph_off);
}
SpecGraphs::~SpecGraphs() = default;

GraphStats SpecGraphs::stats() const {
  GraphStats s;
  s.graphs = static_cast<int64_t>(graphs_.size());
  s.captures = captures_;
  s.replays = replays_;
  s.rebinds = rebinds_;
  return s;
}

void SpecGraphs::stop(const std::string& why) {
  stopped_ = true;
  why_ = why;
  graphs_.clear();
}

bool SpecGraphs::key_of(const Call& c, Keyed& kd) const {
  if (stopped_) return false;
  const auto* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  const int dev = impl->getDevice().index();
  Key& key = kd.key;
  c10::SmallVector<bool, 32>& copied = kd.copied;
  kd.bound.clear(), kd.ptrs.clear();
  key.clear();
  copied.assign(static_cast<size_t>(c.nleaves), false);
  for (int32_t k = 0; k < c.nleaves; ++k) {
    const trd_leaf& l = c.leaves[k];
    key.push_back(l.kind);
    switch (l.kind) {
      case TRD_TENSOR: {
        const at::Tensor* t = c.args[k];
        if (!t || !t->is_cuda() || t->get_device() != dev || t->layout() != c10::kStrided) return false;
        const bool written = std::binary_search(writes_.begin(), writes_.end(), k);
        copied[k] = !written && t->is_non_overlapping_and_dense() && dense_bytes(*t) <= kCopyBytes;
        key.push_back(l.dtype);
        key.push_back(l.dim);
        key.append(l.sizes, l.sizes + l.dim);
        key.append(l.strides, l.strides + l.dim);
        key.push_back(l.storage_offset);
        if (copied[k]) {
          key.push_back(-1);
        } else {
          key.push_back(l.data_ptr ? std::min(__builtin_ctzll(l.data_ptr), kAlignBits) : -2);
          kd.bound.push_back(k);
          kd.ptrs.push_back(l.data_ptr);
        }
        break;
      }
      case TRD_FLOAT: {
        int64_t bits;
        std::memcpy(&bits, &l.fval, sizeof bits);
        key.push_back(bits);
        break;
      }
      case TRD_INT:
      case TRD_BOOL: key.push_back(l.ival); break;
      default: break;
    }
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

std::string SpecGraphs::launch(Graph& g, const Call& c, trd_frame& f, int64_t* out_ints, void* stream) {
  const auto& d = cuda::driver();
  auto s = static_cast<CUstream>(stream);
  for (const auto& [k, buf] : g.statics) {
    const CUresult r = d.MemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(buf.data_ptr()),
                                         reinterpret_cast<CUdeviceptr>(c.args[k]->data_ptr()), dense_bytes(buf), s);
    if (r != CUDA_SUCCESS) return "copying an argument into the graph's buffer: " + driver_error(r);
  }
  if (const CUresult r = d.GraphLaunch(g.exec, s); r != CUDA_SUCCESS)
    return "cuGraphLaunch: " + driver_error(r);
  for (const auto& [slot, t] : g.outputs) {
    if (!t.is_non_overlapping_and_dense()) {
      f.slots[slot] = at::clone(t);
      continue;
    }
    at::Tensor out = at::empty_strided(t.sizes(), t.strides(), t.options());
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
    if (const CUresult r = g.rebind->apply(g.exec, k.ptrs.data()); r != CUDA_SUCCESS) {
      // Some nodes may hold the new addresses and some the old: the graph is no longer one to launch.
      bind_why_ = "rebinding a graph failed (" + driver_error(r) + "); its key captures again";
      graphs_.erase(movable);
      cuda::clear_runtime_error();
      return false;
    }
    g.bound = k.ptrs;
    ++rebinds_;
    found = movable;
  }
  graphs_.splice(graphs_.begin(), graphs_, found);  // most recently replayed first
  return launched(launch(*graphs_.front(), c, f, out_ints, k.stream));
}

bool SpecGraphs::should_capture(const Keyed& k) {
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

// Runs the program under stream capture on `side`; the graph in *graph, or the error.
std::string run_captured(const LoadedModule& mod, int32_t spec, trd_frame& f, const trd_leaf* leaves,
                         int64_t* out_ints, int device, CUstream side, CUgraph* graph) {
  const auto& d = cuda::driver();
  bool ran = false;
  CUresult began, ended = CUDA_SUCCESS;
  {
    cuda::CurrentStreamIs on_side(device, side);
    began = d.StreamBeginCapture(side, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    if (began == CUDA_SUCCESS) {
      t_in_capture = true;
      ran = mod.run(spec, f, leaves, out_ints);
      t_in_capture = false;
      ended = d.StreamEndCapture(side, graph);
    }
  }
  if (began != CUDA_SUCCESS) return "cuStreamBeginCapture: " + driver_error(began);
  if (!ran) return "the program failed under stream capture: " + first_line(f.error);
  if (ended != CUDA_SUCCESS || !*graph) return "cuStreamEndCapture: " + driver_error(ended);
  return {};
}

// Drops what a failed or discarded capture left: its graph, the frame's error, CUDA's last error.
void discard(CUgraph* graph, trd_frame& f) {
  if (*graph) cuda::driver().GraphDestroy(*graph), *graph = nullptr;
  cuda::clear_runtime_error();
  f.error.clear();
  f.error_kind = trd_frame::ErrorKind::kRuntime;
}

// Runs the program under capture with each bound argument moved by `times` times its shift
// (graph_rebind.h), the other arguments as `args` has them; the graph in *out, or the error. The
// frame's slots are emptied after.
std::string capture_moved(const LoadedModule& mod, int32_t spec, const SpecGraphs::Call& c, const SpecGraphs::Keyed& k,
                          const c10::SmallVector<const at::Tensor*, 32>& args, uint64_t times, trd_frame& f,
                          CUstream side, int32_t nout_ints, CUgraph* out) {
  c10::SmallVector<trd_leaf, 32> leaves(c.leaves, c.leaves + c.nleaves);
  std::vector<at::Tensor> fakes;
  fakes.reserve(k.bound.size());
  c10::SmallVector<const at::Tensor*, 32> moved(args.begin(), args.end());
  for (size_t j = 0; j < k.bound.size(); ++j) {
    const int32_t leaf = k.bound[j];
    const at::Tensor& t = *c.args[leaf];
    const uint64_t shift = times * shift_of(j);
    leaves[leaf].data_ptr += shift;
    // Never dereferenced: nothing runs under capture. The device is named, so PyTorch does not ask
    // the driver which device the made-up address belongs to.
    char* base = static_cast<char*>(t.data_ptr()) - t.storage_offset() * t.element_size() + shift;
    fakes.push_back(at::for_blob(base, t.sizes())
                        .strides(t.strides())
                        .storage_offset(t.storage_offset())
                        .options(t.options())
                        .target_device(t.device())
                        .make_tensor());
    moved[leaf] = &fakes.back();
  }
  const at::Tensor* const* before = f.args;
  f.args = moved.data();
  c10::SmallVector<int64_t, 16> ints(static_cast<size_t>(std::max(nout_ints, 1)));  // discarded
  const std::string why = run_captured(mod, spec, f, leaves.data(), ints.data(), k.device, side, out);
  for (int32_t s = 0; s < mod.num_slots(spec); ++s) f.slots[s].reset();
  f.args = before;
  return why;
}

}  // namespace

bool SpecGraphs::capture(const LoadedModule& mod, int32_t spec, const Call& c, const Keyed& k, trd_frame& f,
                         int64_t* out_ints, int32_t nout_ints) {
  const PrivatePoolApi* api = private_pool_api();
  if (!api) return stop("no private memory pool API (trident._compat.private_pool_api)"), false;
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
  CUgraph graph = nullptr;
  std::string why = run_captured(mod, spec, f, c.leaves, out_ints, g->device, side, &graph);
  const int32_t nslots = mod.num_slots(spec);
  for (int32_t s = 0; s < nslots; ++s)
    if (f.slots[s].defined()) g->outputs.emplace_back(s, std::move(f.slots[s]));
  // The same program twice more with the bound arguments moved, for the rebind plan (graph_rebind.h).
  std::vector<RebindArg> moved_args;
  CUgraph moved[2] = {nullptr, nullptr};
  std::string bind_why;  // why this graph will not rebind
  if (why.empty() && !k.bound.empty()) {
    const c10::SmallVector<uint64_t, 32> extents = extents_of(c, k);
    if (!disjoint(k.ptrs, extents)) {
      bind_why = "its tensor arguments overlap";
    } else if (!api->segments) {
      bind_why = "no way to read the private pool's segments (trident._compat.private_pool_api)";
    } else {
      for (size_t j = 0; j < k.bound.size(); ++j) moved_args.push_back({k.ptrs[j], extents[j], shift_of(j)});
      for (uint64_t times = 1; times <= 2 && bind_why.empty(); ++times) {
        CUgraph& m = moved[times - 1];
        if (std::string no = capture_moved(mod, spec, c, k, args, times, f, side, nout_ints, &m); !no.empty()) {
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
  if (why.empty() && moved[0] && moved[1]) {
    const AddressRanges segments = api->segments(g->device, pool);
    std::string plan_why;
    g->rebind = GraphRebind::plan(graph, moved[0], moved[1], moved_args, segments, &plan_why);
    if (!g->rebind) bind_why = plan_why;
  }
  for (CUgraph m : moved)
    if (m) cuda::driver().GraphDestroy(m);
  if (g->rebind) g->graph = graph;  // the plan names its nodes
  else if (graph) cuda::driver().GraphDestroy(graph);
  graph = nullptr;
  if (!why.empty()) {
    discard(&graph, f);
    g.reset();
    stop(why);
    return false;
  }
  bind_why_ = bind_why;
  g->bound = k.ptrs;
  g->out_ints.assign(out_ints, out_ints + nout_ints);
  g->state_id = c.state_id;
  ++captures_;
  graphs_.push_front(std::move(g));
  if (static_cast<int>(graphs_.size()) > kMaxGraphs) graphs_.pop_back();
  return launched(launch(*graphs_.front(), c, f, out_ints, k.stream));
}

}  // namespace trident::runtime
