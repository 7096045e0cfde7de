// The Specialization Cache Module's call: trident._C.SCM's vectorcall.
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
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/autograd/python_variable.h>

#include <chrono>
#include <memory>
#include <optional>
#include <mutex>

#include "errors.h"
#include "flatten.h"
#include "outputs.h"
#include "result_objects.h"
#include "runtime/module/loaded_module.h"
#include "scm_state.h"

namespace trident::bindings::scm {

uint64_t g_state_epoch = 1;

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
// or captured now and replayed (1); 0 when neither applies and the program is to run as it is; -1 when
// a replay in segments failed after issuing work (f.error: the call fails, the program does not run again).
int run_graphed(const ScmState& st, const runtime::LoadedModule& mod, int32_t spec, trd_frame& f, const FlatArgs& flat,
                const std::shared_ptr<const StateSet>& state, int64_t* out_ints) {
  if (!st.graphs || !f.below_autograd || !f.keeps_buffers) return 0;
  runtime::SpecGraphs& graphs = mod.graphs(spec);
  runtime::SpecGraphs::Call c;
  c.leaves = flat.leaves.data();
  c.nleaves = static_cast<int32_t>(flat.leaves.size());
  c.args = flat.tensors.data();
  c.state = state->tensors.data();
  c.nstate = static_cast<int32_t>(state->tensors.size());
  c.state_id = state;
  c.recycle = st.reuse_outputs ? &mod.reuse_state()->pool : nullptr;
  c.mod = &mod;
  c.spec = spec;
  runtime::SpecGraphs::Keyed k;
  if (!graphs.key_of(c, k)) return 0;
  if (graphs.replay(c, k, f, out_ints)) return 1;
  if (!f.error.empty()) return -1;
  if (graphs.should_capture(k) && graphs.capture(mod, spec, c, k, f, out_ints, mod.num_out_ints(spec))) return 1;
  return f.error.empty() ? 0 : -1;
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
    // A spec selected under torch.autocast was traced under it: its program holds autocast's casts
    // as ops, and one it ran with autocast off (a region of `autocast(enabled=False)`) would be
    // cast again by the dispatcher.
    std::optional<c10::impl::ExcludeDispatchKeyGuard> without_autocast;
    if (flat.autocast) without_autocast.emplace(c10::autocast_dispatch_keyset);
    const int graphed = run_graphed(*st, mod, spec, f, flat, state, out_ints.data());
    ok = graphed > 0 || (graphed == 0 && mod.run(spec, f, flat.leaves.data(), out_ints.data()));
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
      if (st->pending_selector && !install_selector(st, /*wait=*/false)) return nullptr;
      std::shared_ptr<const runtime::LoadedModule> mod = st->loaded;  // keeps it alive for this call
      trd_call call = make_call(flat);
      int32_t spec = mod ? mod->select(call) : -1;
      if (mod && mod->interprets_guards()) ++st->interpreted_selects;
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

}  // namespace trident::bindings::scm
