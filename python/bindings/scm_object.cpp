// The Specialization Cache Module as a Python callable: trident._C.SCM.
//
// Hot path (vectorcall, all native): flatten the arguments into leaves; check captured module state
// is unchanged; run the module's decision program; run the selected host program; wrap the outputs.
// No Python function is called and no Python object is created except the outputs.
//
// Cold path: a miss calls the Python `on_miss(*args, **kwargs)`; it captures and compiles (adding a
// specialization through add_spec) and returns NotImplemented to say "dispatch again", or returns a
// result itself (eager fallback). Errors raised there propagate unchanged.
#include <Python.h>

#include <ATen/core/grad_mode.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/autograd/python_variable.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <mutex>

#include "codegen/emit_c.h"
#include "errors.h"
#include "codegen/toolchain.h"
#include "flatten.h"
#include "guards/explain.h"
#include "ir/text.h"
#include "ir/verifier.h"
#include "outputs.h"
#include "planner/liveness.h"
#include "result_objects.h"
#include "runtime/module/loaded_module.h"
#include "scm_object.h"

namespace trident::bindings {
namespace {

// The captured state tensors a run reads, with what the hot path compares for each. The tensors
// are held here, so identity cannot change under a run; `.data = ...` and module.to() can change
// what is inside. Immutable once made: set_state installs a new one, and each run holds the one it
// started with, so another thread replacing the state (a state change seen while this run released
// the GIL, or a Python op inside it let other threads in) never frees tensors a run still uses.
struct StateSet {
  std::vector<at::Tensor> tensors;
  std::vector<trd_leaf> snapshot;
};

struct ScmState {
  ir::Module module;                                  // every specialization, planned
  std::shared_ptr<const runtime::LoadedModule> loaded;  // the module built from `module`
  codegen::BuiltModule built;                         // the object of the spec added last
  codegen::BuiltModule built_selector;                // the decision program's object
  std::shared_ptr<const StateSet> state = std::make_shared<const StateSet>();
  uint64_t state_epoch = 0;
  // Runs of this SCM's module, one at a time: its call sites keep per-site state (kept buffers,
  // recorded launches). Waited for only with the GIL released (run_spec), so a thread holding the
  // GIL never blocks on it; recursive for a Python op inside a run that calls the function again.
  std::recursive_mutex run_mu;
  PyObject* on_miss = nullptr;         // new ref
  PyObject* on_state_change = nullptr; // new ref, may be None
  bool reuse_outputs = false;          // trident.compile(reuse_outputs=): recycle returned buffers
  bool graphs = false;                 // trident.compile(graphs=): replay warm runs as CUDA graphs
  uint64_t hits = 0, misses = 0, compiles = 0, fallbacks = 0, cache_loads = 0;
  uint64_t spec_objects = 0;  // spec objects built or loaded from the cache: one per add_spec
  double compile_seconds = 0.0, load_seconds = 0.0;
};

struct ScmObject {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  ScmState* st;
  PyObject* weakrefs;
};

uint64_t g_state_epoch = 1;  // bumped on any module state change (trident/_state.py)

bool same_leaf_meta(const trd_leaf& a, const trd_leaf& b) {
  if (a.dtype != b.dtype || a.device_type != b.device_type || a.device_index != b.device_index ||
      a.dim != b.dim || a.flags != b.flags || a.data_ptr != b.data_ptr || a.keyset != b.keyset)
    return false;
  for (int d = 0; d < a.dim; ++d)
    if (a.sizes[d] != b.sizes[d] || a.strides[d] != b.strides[d]) return false;
  return true;
}

// True when the captured state still looks as it did at capture; otherwise asks Python to re-read.
bool state_ok(ScmObject* self) {
  ScmState* st = self->st;
  bool fine = st->state_epoch == g_state_epoch;
  const StateSet& state = *st->state;
  for (size_t k = 0; fine && k < state.tensors.size(); ++k) {
    trd_leaf now;
    std::memset(&now, 0, sizeof now);
    fill_tensor_leaf(state.tensors[k], now);
    fine = same_leaf_meta(now, state.snapshot[k]);
  }
  if (fine) return true;
  if (!st->on_state_change || st->on_state_change == Py_None) {
    st->state_epoch = g_state_epoch;
    return true;
  }
  PyObject* r = PyObject_CallNoArgs(st->on_state_change);  // new ref; re-reads state, may clear specs
  if (!r) return false;
  Py_DECREF(r);
  st->state_epoch = g_state_epoch;
  return true;
}

// True when this call cannot record autograd history: grad mode is off, or no tensor it reads
// requires grad. The program then runs below the Autograd dispatch keys, as VariableType's own
// kernels do (ADInplaceOrView stays on, so views and version counters behave as in eager).
bool needs_no_autograd(const StateSet& state, const trd_call& call, const FlatArgs& flat) {
  if (!call.grad_mode) return true;
  for (const auto& leaf : flat.leaves)
    if (leaf.kind == TRD_TENSOR && (leaf.flags & TRD_REQUIRES_GRAD)) return false;
  for (const auto& t : state.tensors)
    if (t.requires_grad()) return false;
  return true;
}

// Three timed runs in a row that each took this long make every later run of their spec release
// the GIL, so other Python threads go on while it computes (a CPU-heavy program, launches that
// wait for a full device queue). Timed: runs 1 to 3 of a spec (run 0 carries one-time costs: lazy
// handles, first allocations), then one in every kTimedEvery, while the spec still holds the GIL.
// Shorter runs keep it: handing it over and back would cost more than they take (0.1-0.2 us).
constexpr auto kReleaseGilAfter = std::chrono::microseconds(20);
constexpr uint32_t kTimedEvery = 16;
constexpr uint32_t kLongInARow = 3;

// The Python exception type of a failed run, as eager's op would raise it.
PyObject* python_error_type(trd_frame::ErrorKind kind) {
  switch (kind) {
    case trd_frame::ErrorKind::kIndex: return PyExc_IndexError;
    case trd_frame::ErrorKind::kValue: return PyExc_ValueError;
    case trd_frame::ErrorKind::kType: return PyExc_TypeError;
    case trd_frame::ErrorKind::kNotImplemented: return PyExc_NotImplementedError;
    case trd_frame::ErrorKind::kZeroDivision: return PyExc_ZeroDivisionError;
    case trd_frame::ErrorKind::kOverflow: return PyExc_OverflowError;
    case trd_frame::ErrorKind::kRuntime: break;
  }
  return PyExc_RuntimeError;
}

// Graph mode (runtime/graphs/spec_graphs.h): this run as a replay of the spec's graph for these arguments,
// or captured now and replayed; false when neither applies and the program is to run as it is.
bool run_graphed(const ScmState& st, const runtime::LoadedModule& mod, int32_t spec, trd_frame& f, const FlatArgs& flat,
                 const std::shared_ptr<const StateSet>& state, int64_t* out_ints) {
  if (!st.graphs || !f.below_autograd || !f.keeps_buffers) return false;
  runtime::SpecGraphs& graphs = mod.graphs(spec);
  runtime::SpecGraphs::Call c;
  c.leaves = flat.leaves.data();
  c.nleaves = static_cast<int32_t>(flat.leaves.size());
  c.args = flat.tensors.data();
  c.state = state->tensors.data();
  c.nstate = static_cast<int32_t>(state->tensors.size());
  c.state_id = state;
  runtime::SpecGraphs::Keyed k;
  if (!graphs.key_of(c, k)) return false;
  if (graphs.replay(c, k, f, out_ints)) return true;
  return graphs.should_capture(k) && graphs.capture(mod, spec, c, k, f, out_ints, mod.num_out_ints(spec));
}

// The specialization this thread's call found its data's branch missing in last (run_spec), while
// its miss is handled: the miss handler's select() answers only later ones, and it captures anew.
thread_local int32_t t_branch_missed_after = -1;

// Runs one specialization. Called with the GIL held. *branch_missed: the call's data took another
// branch than the spec's program was traced for (its `expect`): nothing ran past the check, no
// error is set, and the caller tries the next specialization. Runs of one SCM take turns on its run lock
// (its call sites keep per-site state): a run holding the GIL only try-locks it, and one that must
// wait releases the GIL first and runs without it, so no thread ever waits for the lock while
// holding the GIL. A run without the GIL touches no Python object; what in it does reach Python
// takes the GIL itself (a Python op's kernel, a dispatch mode, the private pool and the
// kept-result object check). The arguments stay alive: the caller's frame holds them.
PyObject* run_spec(ScmObject* self, const runtime::LoadedModule& mod, int32_t spec, const trd_call& call,
                   const FlatArgs& flat, bool* branch_missed) {
  *branch_missed = false;
  ScmState* st = self->st;
  std::shared_ptr<const StateSet> state = st->state;  // this run's own reference (StateSet)
  int32_t nslots = mod.num_slots(spec);
  c10::SmallVector<at::Tensor, 32> slots(nslots);
  c10::SmallVector<int64_t, 8> out_ints(std::max(1, mod.num_out_ints(spec)));
  trd_frame f;
  f.slots = slots.data();
  f.args = flat.tensors.data();
  f.state = state->tensors.data();
  f.nargs = static_cast<int32_t>(flat.tensors.size());
  f.nstate = static_cast<int32_t>(state->tensors.size());
  f.below_autograd = needs_no_autograd(*state, call, flat);
  f.keeps_buffers = !c10::impl::TorchDispatchModeTLS::any_modes_set();
  const bool recycle = st->reuse_outputs;
  runtime::LoadedSpec::RunPolicy& policy = mod.run_policy(spec);
  const uint32_t run_index = policy.runs++;
  const bool timed = !policy.release_gil && (run_index % kTimedEvery == 1 || (run_index > 1 && run_index <= kLongInARow));
  const auto t0 = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  PyThreadState* released = nullptr;
  if (policy.release_gil || !st->run_mu.try_lock()) {
    released = PyEval_SaveThread();
    st->run_mu.lock();
  }
  std::unique_lock<std::recursive_mutex> running(st->run_mu, std::adopt_lock);
  bool ok;
  const bool outer_without_gil = t_running_without_gil;  // a run inside a Python op of another
  t_running_without_gil = released != nullptr;
  {
    std::optional<at::AutoDispatchBelowAutograd> below_autograd;
    if (f.below_autograd) below_autograd.emplace();
    ok = run_graphed(*st, mod, spec, f, flat, state, out_ints.data()) ||
         mod.run(spec, f, flat.leaves.data(), out_ints.data());
  }
  t_running_without_gil = outer_without_gil;
  if (released) PyEval_RestoreThread(released);  // with run_mu held: see above
  if (timed) {
    policy.long_in_a_row = std::chrono::steady_clock::now() - t0 > kReleaseGilAfter ? policy.long_in_a_row + 1 : 0;
    policy.release_gil = policy.long_in_a_row >= kLongInARow;
  }
  PyObject* out = nullptr;
  if (!ok && f.error_kind == trd_frame::ErrorKind::kBranchMiss)
    *branch_missed = true;
  else if (!ok)
    PyErr_SetString(python_error_type(f.error_kind), f.error.c_str());
  else
    out = build_output(mod.output_tree(spec), slots.data(), flat.objects.data(), flat.objects.size(),
                       flat.nodes.data(), flat.nodes.size(), state->tensors.data(), out_ints.data());
  for (auto& t : slots) t.reset();  // the frame is gone: what is still held now has escaped
  mod.finish_run(recycle);
  return out;
}

// Runs `spec` and, while the call's data takes another branch than a spec was traced for, the next
// specialization whose guards hold. nullptr without a Python error: none takes this branch
// (t_branch_missed_after names the last one tried, for the miss handler).
PyObject* run_branches(ScmObject* self, const runtime::LoadedModule& mod, int32_t spec, trd_call call,
                       const FlatArgs& flat) {
  for (;;) {
    bool missed = false;
    PyObject* r = run_spec(self, mod, spec, call, flat, &missed);
    if (!missed) return r;
    call.after = spec;
    const int32_t next = mod.select(call);
    if (next < 0) {
      t_branch_missed_after = spec;
      return nullptr;
    }
    spec = next;
  }
}

PyObject* scm_vectorcall(PyObject* callable, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* self = reinterpret_cast<ScmObject*>(callable);
  ScmState* st = self->st;
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  try {
    FlatArgs flat;
    bool native = flatten_args(args, nargs, kwnames, flat);
    // Also with no captured state: a program traced without a parameter or buffer is stale once
    // one appears (the epoch says some module changed; state_ok compares nothing else then).
    if (native && !state_ok(self)) return nullptr;
    if (native) {
      std::shared_ptr<const runtime::LoadedModule> mod = st->loaded;  // keeps it alive for this call
      trd_call call = make_call(flat);
      int32_t spec = mod ? mod->select(call) : -1;
      if (spec >= 0) {
        PyObject* r = run_branches(self, *mod, spec, call, flat);
        if (r || PyErr_Occurred()) {
          ++st->hits;
          return r;
        }
      }
    }
    ++st->misses;
    struct BranchMissHandled {  // however the miss ends
      ~BranchMissHandled() { t_branch_missed_after = -1; }
    } handled;
    // The miss handler compiles a specialization for exactly this call and says so with
    // NotImplemented: it must then be selected. Another thread may have changed the module's state
    // (dropping every specialization) before this thread got the GIL back: then the state is read
    // again and the miss handled again, a bounded number of times.
    int32_t spec = -1;
    std::shared_ptr<const runtime::LoadedModule> mod;
    trd_call call = make_call(flat);
    for (int attempt = 0; attempt < 4 && spec < 0; ++attempt) {
      if (attempt > 0 && native && !state_ok(self)) return nullptr;
      PyObject* r = PyObject_Vectorcall(st->on_miss, args, nargsf, kwnames);  // new ref
      if (!r || r != Py_NotImplemented) return r;
      Py_DECREF(r);
      if (!native) {
        // The miss handler may have made the arguments describable (a class admitted for
        // flattening by attributes, arg_objects.h): describe them again.
        flat = FlatArgs{};
        native = flatten_args(args, nargs, kwnames, flat);
        if (!native) break;
        call = make_call(flat);
        if (!state_ok(self)) return nullptr;
      }
      mod = st->loaded;
      call.after = -1;
      spec = mod ? mod->select(call) : -1;
      if (spec >= 0) {
        PyObject* r = run_branches(self, *mod, spec, call, flat);
        if (r || PyErr_Occurred()) return r;
        spec = -1;  // still no specialization for this branch: the miss handler again
      }
    }
    std::string why = native ? "no specialization accepts the call it was compiled for"
                             : "arguments cannot be described natively (" + flat.unsupported + ")";
    PyErr_SetString(PyExc_RuntimeError, ("trident internal error: " + why).c_str());
    return nullptr;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}

// ---- methods (cold) ----

// Builds `source` (or finds it in the disk cache) and loads the object with `load`. A cached object
// that passed its checks and still does not load is built again, once, with a warning.
codegen::BuiltModule build_and_load(const std::string& source, const std::function<void(const std::string&)>& load) {
  codegen::BuiltModule built = codegen::build_module(source);
  try {
    load(built.so_path);
  } catch (const runtime::ModuleLoadError& e) {
    if (!built.cache_hit) throw;
    codegen::add_cache_warning(std::string("trident: the cached module ") + built.so_path + " did not load (" +
                               e.what() + "); rebuilt it");
    built = codegen::build_module(source, /*rebuild=*/true);
    load(built.so_path);
  }
  return built;
}

PyObject* scm_add_spec(PyObject* py_self, PyObject* arg) {
  auto* self = reinterpret_cast<ScmObject*>(py_self);
  ScmState* st = self->st;
  const char* text = PyUnicode_AsUTF8(arg);
  if (!text) return nullptr;
  try {
    ir::Module parsed = ir::parse_module(text);
    if (parsed.specs.size() != 1) throw ir::ParseError("add_spec takes exactly one spec");
    ir::Module next = st->module;
    ir::Spec spec = std::move(parsed.specs[0]);
    spec.id = static_cast<int32_t>(next.specs.size());
    ir::verify(spec);  // a ValueError: the text is the caller's (the lowering's, or a test's)
    planner::insert_releases(spec);
    next.specs.push_back(std::move(spec));
    const ir::Spec& added = next.specs.back();
    // Only the new spec's object and the selector are built; the module that replaces the current
    // one shares the other specs' loaded objects (and their sites' state) and the buffer pool.
    const codegen::EmittedSpec spec_code = codegen::emit_spec(added);
    const codegen::EmittedSelector selector_code = codegen::emit_selector(next.specs);
    std::shared_ptr<const runtime::LoadedModule> current = st->loaded;
    std::vector<std::shared_ptr<runtime::LoadedSpec>> specs;
    std::shared_ptr<runtime::ReuseState> reuse = std::make_shared<runtime::ReuseState>();
    if (current) specs = current->specs(), reuse = current->reuse_state();
    codegen::BuiltModule built, built_selector;
    double load_seconds = 0.0;
    std::shared_ptr<runtime::LoadedModule> loaded;
    std::string load_error;
    bool internal = false;  // load_error is a broken invariant of trident (common/errors.h)
    // Other threads run while the compiler does (the controller's lock keeps misses one at a time;
    // the hot path only reads st->loaded, replaced below with the GIL held).
    Py_BEGIN_ALLOW_THREADS
    try {
      std::shared_ptr<runtime::LoadedSpec> loaded_spec;
      const auto t0 = std::chrono::steady_clock::now();
      built = build_and_load(spec_code.source, [&](const std::string& path) {
        loaded_spec = runtime::LoadedSpec::load(path, added, {spec_code.sites, spec_code.kernels, spec_code.output},
                                                *reuse);
      });
      specs.push_back(std::move(loaded_spec));
      built_selector = build_and_load(selector_code.source, [&](const std::string& path) {
        loaded = runtime::LoadedModule::assemble(path, specs, reuse, selector_code.tables.tables);
      });
      load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() -
                     built.compile_seconds - built_selector.compile_seconds;
    } catch (const InternalError& e) {
      load_error = e.what();
      internal = true;
    } catch (const std::exception& e) {
      load_error = e.what();
      if (load_error.empty()) load_error = "unknown error";
    }
    Py_END_ALLOW_THREADS
    if (!emit_cache_warnings()) return nullptr;
    if (internal) throw InternalError(load_error);
    if (!load_error.empty()) throw codegen::ToolchainError(load_error);
    // Commit only after everything succeeded: a failed compile leaves the SCM as it was.
    st->module = std::move(next);
    st->loaded = std::move(loaded);
    st->built = built;
    st->built_selector = built_selector;
    ++st->compiles;
    if (built.cache_hit) ++st->cache_loads;
    st->compile_seconds += built.compile_seconds + built_selector.compile_seconds;
    st->load_seconds += std::max(0.0, load_seconds);
    ++st->spec_objects;
    return PyLong_FromLong(static_cast<long>(st->module.specs.size() - 1));
  } catch (const std::exception& e) {
    set_python_error(e);
  }
  return nullptr;
}

PyObject* scm_set_state(PyObject* py_self, PyObject* arg) {
  auto* self = reinterpret_cast<ScmObject*>(py_self);
  ScmState* st = self->st;
  PyObject* seq = PySequence_Fast(arg, "set_state expects a sequence of tensors");  // new ref
  if (!seq) return nullptr;
  std::vector<at::Tensor> tensors;
  std::vector<trd_leaf> snap;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  for (Py_ssize_t k = 0; k < n; ++k) {
    PyObject* item = PySequence_Fast_GET_ITEM(seq, k);  // borrowed
    if (!THPVariable_Check(item)) {
      Py_DECREF(seq);
      PyErr_Format(PyExc_TypeError, "set_state: item %zd is %s, expected a torch.Tensor", k, Py_TYPE(item)->tp_name);
      return nullptr;
    }
    tensors.push_back(THPVariable_Unpack(item));
    trd_leaf leaf;
    std::memset(&leaf, 0, sizeof leaf);
    fill_tensor_leaf(tensors.back(), leaf);
    snap.push_back(leaf);
  }
  Py_DECREF(seq);
  // The same tensors as they were: the state set stays the one runs and CUDA graphs know (a set
  // re-read after some unrelated module changed, as HF's forward slicing a ModuleList does).
  const StateSet& now = *st->state;
  bool same = now.tensors.size() == tensors.size();
  for (size_t k = 0; same && k < tensors.size(); ++k)
    same = now.tensors[k].is_same(tensors[k]) && same_leaf_meta(now.snapshot[k], snap[k]);
  if (same) {
    st->state_epoch = g_state_epoch;
    Py_RETURN_NONE;
  }
  auto next = std::make_shared<StateSet>();
  next->tensors = std::move(tensors);
  next->snapshot = std::move(snap);
  st->state = std::move(next);
  st->state_epoch = g_state_epoch;
  Py_RETURN_NONE;
}

PyObject* scm_clear(PyObject* py_self, PyObject*) {
  auto* self = reinterpret_cast<ScmObject*>(py_self);
  self->st->module.specs.clear();
  self->st->loaded.reset();
  Py_RETURN_NONE;
}

PyObject* scm_counters(PyObject* py_self, PyObject*) {
  ScmState* st = reinterpret_cast<ScmObject*>(py_self)->st;
  runtime::LoadedModule::ReuseStats reuse;
  runtime::LoadedModule::GemmStats gemm;
  runtime::LoadedModule::ReplayStats replay;
  runtime::GraphStats graphs;
  if (st->loaded)
    reuse = st->loaded->reuse_stats(), gemm = st->loaded->gemm_stats(), replay = st->loaded->replay_stats(),
    graphs = st->loaded->graph_stats();
  return Py_BuildValue("{s:K,s:K,s:K,s:n,s:K,s:K,s:d,s:d,s:K,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L}", "hits", (unsigned long long)st->hits,
                       "misses", (unsigned long long)st->misses, "compiles", (unsigned long long)st->compiles,
                       "specializations", (Py_ssize_t)st->module.specs.size(), "fallbacks",
                       (unsigned long long)st->fallbacks, "module_cache_loads",
                       (unsigned long long)st->cache_loads, "compile_seconds", st->compile_seconds,
                       "load_seconds", st->load_seconds, "spec_objects", (unsigned long long)st->spec_objects,
                       "reused_buffers", (long long)reuse.holding, "escaped_buffers", (long long)reuse.escaped,
                       "reused_bytes", (long long)reuse.bytes, "recycled_outputs", (long long)reuse.recycled,
                       "cublaslt_gemms", (long long)gemm.native,
                       "cublaslt_declined", (long long)gemm.declined, "cublaslt_replayed",
                       (long long)gemm.replayed, "aten_replay_sites", (long long)replay.sites, "aten_replayed",
                       (long long)replay.replaying, "graphs", (long long)graphs.graphs, "graph_captures",
                       (long long)graphs.captures, "graph_replays", (long long)graphs.replays, "graph_rebinds",
                       (long long)graphs.rebinds);
}

// graph_notes() -> [(spec, stopped, why)]: each specialization whose runs do not replay as CUDA
// graphs (stopped), or whose graphs are keyed by their arguments' addresses (runtime/graphs/spec_graphs.h).
PyObject* scm_graph_notes(PyObject* py_self, PyObject*) {
  ScmState* st = reinterpret_cast<ScmObject*>(py_self)->st;
  PyObject* out = PyList_New(0);  // new ref
  if (!out || !st->loaded || !st->graphs) return out;
  for (const auto& note : st->loaded->graph_notes()) {
    PyObject* item = Py_BuildValue("(iOs)", note.spec, note.stopped ? Py_True : Py_False, note.why.c_str());  // new ref
    if (!item || PyList_Append(out, item) < 0) {
      Py_XDECREF(item);
      Py_DECREF(out);
      return nullptr;
    }
    Py_DECREF(item);
  }
  return out;
}

// spec_runs() -> [int]: how many runs each specialization has made (its loaded object's count, which
// a module that adds a specialization shares with the one it replaces).
PyObject* scm_spec_runs(PyObject* py_self, PyObject*) {
  ScmState* st = reinterpret_cast<ScmObject*>(py_self)->st;
  const int32_t n = st->loaded ? st->loaded->num_specs() : 0;
  PyObject* out = PyList_New(n);  // new ref
  for (int32_t k = 0; out && k < n; ++k) {
    PyObject* v = PyLong_FromUnsignedLong(st->loaded->run_policy(k).runs);  // new ref, stolen below
    if (!v) {
      Py_DECREF(out);
      return nullptr;
    }
    PyList_SET_ITEM(out, k, v);
  }
  return out;
}

// branch_missed() -> bool: the miss this thread handles is a call whose data took a branch no
// specialization was traced for (the controller captures anew instead of reusing a capture).
PyObject* scm_branch_missed(PyObject*, PyObject*) { return PyBool_FromLong(t_branch_missed_after >= 0); }

PyObject* scm_note_fallback(PyObject* py_self, PyObject*) {
  ++reinterpret_cast<ScmObject*>(py_self)->st->fallbacks;
  Py_RETURN_NONE;
}

PyObject* scm_ir(PyObject* py_self, PyObject*) {
  return PyUnicode_FromString(ir::print(reinterpret_cast<ScmObject*>(py_self)->st->module).c_str());
}

PyObject* scm_paths(PyObject* py_self, PyObject*) {
  ScmState* st = reinterpret_cast<ScmObject*>(py_self)->st;
  return Py_BuildValue("(ss)", st->built.source_path.c_str(), st->built.so_path.c_str());
}

PyObject* scm_selector_paths(PyObject* py_self, PyObject*) {
  ScmState* st = reinterpret_cast<ScmObject*>(py_self)->st;
  return Py_BuildValue("(ss)", st->built_selector.source_path.c_str(), st->built_selector.so_path.c_str());
}

// explain_call(*args, **kwargs) -> [(spec_id, "" if selected-able else first failing guard)], or a str
// saying why the arguments cannot be described natively.
PyObject* scm_explain_call(PyObject* py_self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  ScmState* st = reinterpret_cast<ScmObject*>(py_self)->st;
  try {
    FlatArgs flat;
    if (!flatten_args(args, PyVectorcall_NARGS(nargsf), kwnames, flat))
      return PyUnicode_FromString(flat.unsupported.c_str());
    trd_call call = make_call(flat);
    PyObject* out = PyList_New(0);  // new ref
    for (const auto& s : st->module.specs) {
      std::string why = guards::first_failure(s, call);
      PyObject* item = Py_BuildValue("(is)", s.id, why.c_str());
      PyList_Append(out, item);
      Py_DECREF(item);
    }
    return out;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}

PyObject* scm_select(PyObject* py_self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  ScmState* st = reinterpret_cast<ScmObject*>(py_self)->st;
  FlatArgs flat;
  if (!flatten_args(args, PyVectorcall_NARGS(nargsf), kwnames, flat) || !st->loaded) return PyLong_FromLong(-1);
  trd_call call = make_call(flat);
  call.after = t_branch_missed_after;  // inside a miss whose data no spec's branch took: later ones
  return PyLong_FromLong(st->loaded->select(call));
}

PyMethodDef scm_methods[] = {
    {"add_spec", scm_add_spec, METH_O, "Add one specialization (host IR text); rebuilds and loads the module."},
    {"set_state", scm_set_state, METH_O, "Set the captured module state tensors (parameters, buffers)."},
    {"clear", scm_clear, METH_NOARGS, "Drop every specialization."},
    {"counters", scm_counters, METH_NOARGS, "hits, misses, compiles, specializations, fallbacks, ..."},
    {"note_fallback", scm_note_fallback, METH_NOARGS, "Count one call the Python layer ran eagerly."},
    {"spec_runs", scm_spec_runs, METH_NOARGS, "[runs of each specialization]."},
    {"branch_missed", scm_branch_missed, METH_NOARGS, "Whether the miss being handled took an untraced branch."},
    {"graph_notes", scm_graph_notes, METH_NOARGS, "[(spec, stopped, why)]: what keeps specs' graphs from serving every call."},
    {"ir", scm_ir, METH_NOARGS, "Host IR of every specialization (after planning)."},
    {"paths", scm_paths, METH_NOARGS, "(generated source path, shared object path) of the spec added last."},
    {"selector_paths", scm_selector_paths, METH_NOARGS, "(generated source path, shared object path) of the selector."},
    {"explain_call", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(scm_explain_call)),
     METH_FASTCALL | METH_KEYWORDS, "For each specialization, the first guard this call fails ('' if none)."},
    {"select", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(scm_select)), METH_FASTCALL | METH_KEYWORDS,
     "The specialization the decision program picks for these arguments, or -1."},
    {nullptr, nullptr, 0, nullptr}};

PyObject* scm_get_on_miss(PyObject* py_self, void*) {
  PyObject* m = reinterpret_cast<ScmObject*>(py_self)->st->on_miss;
  Py_INCREF(m);
  return m;  // new ref
}

// The function or module compiled: `fn` of the miss handler's controller. inspect.signature (and
// so transformers' generate(), which validates keyword arguments against forward's) follows it.
PyObject* scm_get_wrapped(PyObject* py_self, void*) {
  PyObject* controller = PyObject_GetAttrString(reinterpret_cast<ScmObject*>(py_self)->st->on_miss, "__self__");
  if (!controller) return nullptr;
  PyObject* fn = PyObject_GetAttrString(controller, "fn");
  Py_DECREF(controller);
  return fn;
}

PyGetSetDef scm_getset[] = {
    {"on_miss", scm_get_on_miss, nullptr, "The Python miss handler (its __self__ is the controller).", nullptr},
    {"__wrapped__", scm_get_wrapped, nullptr, "The function or module compiled.", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

PyObject* scm_new(PyTypeObject* type, PyObject* args, PyObject* kwds) {
  static const char* kwlist[] = {"on_miss", "on_state_change", "reuse_outputs", "graphs", nullptr};
  PyObject* on_miss = nullptr;
  PyObject* on_state_change = Py_None;
  int reuse_outputs = 0, graphs = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|Opp", const_cast<char**>(kwlist), &on_miss, &on_state_change,
                                   &reuse_outputs, &graphs))
    return nullptr;
  if (!PyCallable_Check(on_miss)) {
    PyErr_SetString(PyExc_TypeError, "SCM: on_miss must be callable");
    return nullptr;
  }
  auto* self = reinterpret_cast<ScmObject*>(type->tp_alloc(type, 0));
  if (!self) return nullptr;
  self->vectorcall = scm_vectorcall;
  self->st = new ScmState();
  Py_INCREF(on_miss);
  Py_INCREF(on_state_change);
  self->st->on_miss = on_miss;
  self->st->on_state_change = on_state_change;
  self->st->reuse_outputs = reuse_outputs != 0;
  self->st->graphs = graphs != 0;
  return reinterpret_cast<PyObject*>(self);
}

int scm_traverse(PyObject* py_self, visitproc visit, void* arg) {
  auto* self = reinterpret_cast<ScmObject*>(py_self);
  if (self->st) {
    Py_VISIT(self->st->on_miss);
    Py_VISIT(self->st->on_state_change);
  }
  return 0;
}

int scm_clear_refs(PyObject* py_self) {
  auto* self = reinterpret_cast<ScmObject*>(py_self);
  if (self->st) {
    Py_CLEAR(self->st->on_miss);
    Py_CLEAR(self->st->on_state_change);
  }
  return 0;
}

void scm_dealloc(PyObject* py_self) {
  auto* self = reinterpret_cast<ScmObject*>(py_self);
  PyObject_GC_UnTrack(py_self);
  if (self->weakrefs) PyObject_ClearWeakRefs(py_self);
  scm_clear_refs(py_self);
  delete self->st;
  self->st = nullptr;
  Py_TYPE(py_self)->tp_free(py_self);
}

PyTypeObject ScmType = {PyVarObject_HEAD_INIT(nullptr, 0)};

}  // namespace

void bump_state_epoch() { ++g_state_epoch; }

bool register_scm_type(PyObject* module) {
  ScmType.tp_name = "trident._C.SCM";
  ScmType.tp_basicsize = sizeof(ScmObject);
  ScmType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL;
  ScmType.tp_doc = "Specialization Cache Module: a native callable serving every specialization of one function.";
  ScmType.tp_new = scm_new;
  ScmType.tp_dealloc = scm_dealloc;
  ScmType.tp_traverse = scm_traverse;
  ScmType.tp_clear = scm_clear_refs;
  ScmType.tp_call = PyVectorcall_Call;
  ScmType.tp_vectorcall_offset = offsetof(ScmObject, vectorcall);
  ScmType.tp_weaklistoffset = offsetof(ScmObject, weakrefs);
  ScmType.tp_methods = scm_methods;
  ScmType.tp_getset = scm_getset;
  if (PyType_Ready(&ScmType) < 0) return false;
  Py_INCREF(&ScmType);
  return PyModule_AddObject(module, "SCM", reinterpret_cast<PyObject*>(&ScmType)) == 0;
}

}  // namespace trident::bindings
