#include "runtime/spec_graphs.h"

#include <ATen/ops/empty_strided.h>
#include <ATen/ops/clone.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <unordered_set>

#include "runtime/cuda_driver.h"
#include "runtime/loaded_module.h"

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

}  // namespace

bool in_graph_capture() { return t_in_capture; }

struct SpecGraphs::Graph {
  Key key;
  int device = -1;
  CUgraphExec exec = nullptr;
  std::optional<PoolId> pool;
  std::shared_ptr<const void> state_id;
  std::vector<std::pair<int32_t, at::Tensor>> statics;  // leaf -> the buffer the graph reads it from
  std::vector<std::pair<int32_t, at::Tensor>> outputs;  // frame slot -> the graph's result
  std::vector<int64_t> out_ints;

  ~Graph() {
    // An executable graph still running is freed when it completes (cuGraphExecDestroy); its pool's
    // blocks go back to PyTorch after the tensors over them.
    if (exec) cuda::driver().GraphExecDestroy(exec);
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
  return s;
}

void SpecGraphs::stop(const std::string& why) {
  stopped_ = true;
  why_ = why;
  graphs_.clear();
}

bool SpecGraphs::key_of(const Call& c, Keyed& k) const {
  if (stopped_) return false;
  const auto* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  const int dev = impl->getDevice().index();
  Key& key = k.key;
  c10::SmallVector<bool, 32>& copied = k.copied;
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
        key.push_back(copied[k] ? -1 : static_cast<int64_t>(l.data_ptr));
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
  k.device = dev;
  k.stream = st;
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
  for (auto it = graphs_.begin(); it != graphs_.end(); ++it) {
    if ((*it)->key != k.key) continue;
    graphs_.splice(graphs_.begin(), graphs_, it);  // most recently replayed first
    return launched(launch(*graphs_.front(), c, f, out_ints, k.stream));
  }
  return false;
}

bool SpecGraphs::should_capture(const Keyed& k) {
  auto it = std::find_if(recent_.begin(), recent_.end(), [&](const auto& e) { return e.first == k.key; });
  if (it == recent_.end()) {
    recent_.emplace_front(k.key, 0);
    if (recent_.size() > kRecentKeys) recent_.pop_back();
    it = recent_.begin();
  }
  if (++it->second < kRepeats) return false;
  recent_.erase(it);
  return true;
}

bool SpecGraphs::capture(const LoadedModule& mod, int32_t spec, const Call& c, const Keyed& k, trd_frame& f,
                         int64_t* out_ints, int32_t nout_ints) {
  const auto& d = cuda::driver();
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
  bool ran = false;
  CUgraph graph = nullptr;
  CUresult began, ended = CUDA_SUCCESS;
  {
    cuda::CurrentStreamIs on_side(g->device, side);
    began = d.StreamBeginCapture(side, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    if (began == CUDA_SUCCESS) {
      t_in_capture = true;
      ran = mod.run(spec, f, c.leaves, out_ints);
      t_in_capture = false;
      ended = d.StreamEndCapture(side, &graph);
    }
  }
  api->end(g->device, pool);
  f.args = caller_args;
  f.keeps_buffers = caller_keeps;

  const int32_t nslots = mod.num_slots(spec);
  for (int32_t s = 0; s < nslots; ++s)
    if (f.slots[s].defined()) g->outputs.emplace_back(s, std::move(f.slots[s]));
  std::string why;
  if (began != CUDA_SUCCESS) why = "cuStreamBeginCapture: " + driver_error(began);
  else if (!ran) why = "the program failed under stream capture: " + first_line(f.error);
  else if (ended != CUDA_SUCCESS || !graph) why = "cuStreamEndCapture: " + driver_error(ended);
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
    if (const CUresult r = d.GraphInstantiateWithFlags(&g->exec, graph, 0); r != CUDA_SUCCESS)
      why = "cuGraphInstantiate: " + driver_error(r), g->exec = nullptr;
  }
  if (graph) d.GraphDestroy(graph);
  if (!why.empty()) {
    cuda::clear_runtime_error();
    f.error.clear();
    f.error_kind = trd_frame::ErrorKind::kRuntime;
    g.reset();
    stop(why);
    return false;
  }
  g->out_ints.assign(out_ints, out_ints + nout_ints);
  g->state_id = c.state_id;
  ++captures_;
  graphs_.push_front(std::move(g));
  if (static_cast<int>(graphs_.size()) > kMaxGraphs) graphs_.pop_back();
  return launched(launch(*graphs_.front(), c, f, out_ints, k.stream));
}

}  // namespace trident::runtime
