// The Specialization Cache Module as a Python callable: trident._C.SCM, its type and cold methods.
// Its call (the hot path) is scm_call.cpp.
//
// Cold path: a miss calls the Python `on_miss(*args, **kwargs)`; it captures and compiles (adding a
// specialization through add_spec) and returns NotImplemented to say "dispatch again", or returns a
// result itself (eager fallback). Errors raised there propagate unchanged.
#include <Python.h>

#include <torch/csrc/autograd/python_variable.h>

#include <functional>
#include <future>
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
#include "scm_state.h"

namespace trident::bindings {
namespace {

using namespace scm;

// ---- methods (cold) ----

// Loads `built` (the object of `source`, just built or found in the disk cache) with `load`. A
// cached object that passed its checks and still does not load is built again, once, with a warning.
codegen::BuiltModule load_built(const std::string& source, codegen::BuiltModule built,
                                const std::function<void(const std::string&)>& load) {
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

}  // namespace

bool scm::install_selector(ScmState* st, bool wait) {
  auto& pending = st->pending_selector;
  if (!pending) return true;
  if (pending->build->orphaned()) pending->build = SelectorBuild::start(pending->build->source());  // a forked child
  if (!(wait ? pending->build->wait(std::chrono::minutes(1)) : pending->build->done())) return true;
  const std::unique_ptr<ScmState::PendingSelector> done = std::move(pending);
  const SelectorBuild& build = *done->build;
  std::string error = build.error();
  if (error.empty()) {
    try {
      std::shared_ptr<runtime::LoadedModule> mod;
      const codegen::BuiltModule built = load_built(build.source(), build.built(), [&](const std::string& path) {
        mod = runtime::LoadedModule::assemble(path, st->loaded->specs(), st->loaded->reuse_state(), done->tables);
      });
      st->loaded = std::move(mod);
      st->built_selector = built;
      st->compile_seconds += built.compile_seconds;
      st->background_compile_seconds += built.compile_seconds;
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (!emit_cache_warnings()) return false;
  if (!error.empty()) {
    const std::string why = "trident: the decision program did not compile (" + error +
                            "); this function keeps selecting its specializations by interpreted guards";
    if (PyErr_WarnEx(PyExc_RuntimeWarning, why.c_str(), 1) < 0) return false;
  }
  return true;
}

namespace {

// What selecting by guards needs of each spec: its structure and guards (not its program).
std::vector<ir::Spec> checks_of(const std::vector<ir::Spec>& specs) {
  std::vector<ir::Spec> checks(specs.size());
  for (size_t k = 0; k < specs.size(); ++k) checks[k].structure = specs[k].structure, checks[k].guards = specs[k].guards;
  return checks;
}

// How long a miss waits for its selector's object before serving calls by interpreted guards: what
// finding it in the disk cache takes, not what compiling it does.
constexpr std::chrono::milliseconds kSelectorWait{10};

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
    std::unique_ptr<ScmState::PendingSelector> pending;  // set when the selector is still compiling
    double load_seconds = 0.0;
    std::shared_ptr<runtime::LoadedModule> loaded;
    std::string load_error;
    bool internal = false;  // load_error is a broken invariant of trident (common/errors.h)
    // Other threads run while the compiler does (the controller's lock keeps misses one at a time;
    // the hot path only reads st->loaded, replaced below with the GIL held).
    Py_BEGIN_ALLOW_THREADS
    try {
      std::shared_ptr<runtime::LoadedSpec> loaded_spec;
      // Load time is what the two loads take (the compiles overlap, so it is not the wall time
      // less both compile times).
      auto timed = [&](const std::function<void(const std::string&)>& load) {
        return [&, load](const std::string& path) {
          const auto t0 = std::chrono::steady_clock::now();
          load(path);
          load_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        };
      };
      // The two objects do not depend on each other: the selector's compiler runs while the
      // spec's does, on a thread of its own (selector_builds.h). A selector the disk cache holds
      // is found within kSelectorWait; one being compiled is not waited for: the module then
      // interprets its guards until the first call after the compile installs it.
      std::shared_ptr<SelectorBuild> selector_build = SelectorBuild::start(selector_code.source);
      built = load_built(spec_code.source, codegen::build_module(spec_code.source), timed([&](const std::string& path) {
        loaded_spec = runtime::LoadedSpec::load(path, added, {spec_code.sites, spec_code.kernels, spec_code.output},
                                                *reuse);
      }));
      specs.push_back(std::move(loaded_spec));
      // A selector that failed to compile is reported by the first call after (install_selector),
      // which keeps interpreting the guards: the spec itself works.
      if (selector_build->wait(kSelectorWait) && selector_build->error().empty()) {
        built_selector = load_built(selector_code.source, selector_build->built(), timed([&](const std::string& path) {
          loaded = runtime::LoadedModule::assemble(path, specs, reuse, selector_code.tables.tables);
        }));
      } else {
        loaded = runtime::LoadedModule::by_guards(specs, reuse, checks_of(next.specs));
        pending = std::make_unique<ScmState::PendingSelector>();
        pending->build = std::move(selector_build);
        pending->tables = selector_code.tables.tables;
      }
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
    if (!pending) st->built_selector = built_selector;
    st->pending_selector = std::move(pending);
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
  self->st->pending_selector.reset();
  Py_RETURN_NONE;
}

PyObject* scm_counters(PyObject* py_self, PyObject*) {
  ScmState* st = reinterpret_cast<ScmObject*>(py_self)->st;
  // A selector still compiling is waited for, so that the figures are final (compile_seconds).
  if (!install_selector(st, /*wait=*/true)) return nullptr;
  runtime::LoadedModule::ReuseStats reuse;
  runtime::LoadedModule::GemmStats gemm;
  runtime::LoadedModule::ReplayStats replay;
  runtime::GraphStats graphs;
  if (st->loaded)
    reuse = st->loaded->reuse_stats(), gemm = st->loaded->gemm_stats(), replay = st->loaded->replay_stats(),
    graphs = st->loaded->graph_stats();
  PyObject* d = Py_BuildValue("{s:K,s:K,s:K,s:n,s:K,s:K,s:d,s:d,s:K,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L}", "hits", (unsigned long long)st->hits,
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
  if (!d) return nullptr;
  // The entries past Py_BuildValue's argument count, each a new reference until the dict holds it.
  const std::pair<const char*, PyObject*> more[] = {
      {"background_compile_seconds", PyFloat_FromDouble(st->background_compile_seconds)},
      {"interpreted_selects", PyLong_FromUnsignedLongLong(st->interpreted_selects)},
      {"graph_patches", PyLong_FromLongLong(graphs.patches)},
      {"graph_scalar_patches", PyLong_FromLongLong(graphs.scalar_patches)},
      {"graph_patched_nodes", PyLong_FromLongLong(graphs.patched_nodes)},
      {"graph_result_nodes", PyLong_FromLongLong(graphs.result_nodes)},
      {"graph_segments", PyLong_FromLongLong(graphs.segments)},
      {"graph_read_misses", PyLong_FromLongLong(graphs.read_misses)}};
  bool ok = true;
  for (const auto& [name, value] : more) {
    ok = ok && value && PyDict_SetItemString(d, name, value) == 0;
    Py_XDECREF(value);
  }
  if (!ok) Py_CLEAR(d);
  return d;
}

// A new list of make(item) (each a new reference) for each of `items`; nullptr with the error set.
template <class Items, class Make>
PyObject* py_list(const Items& items, Make make) {
  PyObject* out = PyList_New(0);  // new ref
  for (const auto& x : items) {
    if (!out) return nullptr;
    PyObject* item = make(x);  // new ref
    if (!item || PyList_Append(out, item) < 0) Py_CLEAR(out);
    Py_XDECREF(item);
  }
  return out;
}

// graph_recaptures() -> [(spec, what, count, last)]: why calls captured graphs of their own beside
// one their specialization held (runtime/graphs/spec_graphs.h: recaptures).
PyObject* scm_graph_recaptures(PyObject* py_self, PyObject*) {
  ScmState* st = reinterpret_cast<ScmObject*>(py_self)->st;
  if (!st->loaded || !st->graphs) return PyList_New(0);
  return py_list(st->loaded->graph_recaptures(), [](const runtime::LoadedModule::GraphRecapture& r) {
    return Py_BuildValue("(isLs)", r.spec, r.why.what.c_str(), static_cast<long long>(r.why.count), r.why.last.c_str());
  });
}

// graph_notes() -> [(spec, kind, why)]: each specialization whose runs do not replay as CUDA graphs
// ("stopped"), or whose graphs are keyed by their arguments' addresses ("addresses") or their scalars'
// values ("scalars") (runtime/graphs/spec_graphs.h).
PyObject* scm_graph_notes(PyObject* py_self, PyObject*) {
  ScmState* st = reinterpret_cast<ScmObject*>(py_self)->st;
  if (!st->loaded || !st->graphs) return PyList_New(0);
  return py_list(st->loaded->graph_notes(), [](const runtime::LoadedModule::GraphNote& n) {
    return Py_BuildValue("(iss)", n.spec, n.kind, n.why.c_str());
  });
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
  if (!install_selector(st, /*wait=*/true)) return nullptr;
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

// select(*args, **kwargs): the module's choice, as a call would make it (by the compiled selector,
// or by interpreted guards while it compiles: counters() first to be sure of the compiled one);
// select_by_guards: the choice of the guards interpreted in spec order.
PyObject* scm_select(PyObject* py_self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  ScmState* st = reinterpret_cast<ScmObject*>(py_self)->st;
  if (st->pending_selector && !install_selector(st, /*wait=*/false)) return nullptr;
  FlatArgs flat;
  if (!flatten_args(args, PyVectorcall_NARGS(nargsf), kwnames, flat) || !st->loaded) return PyLong_FromLong(-1);
  trd_call call = make_call(flat);
  call.after = t_branch_missed_after;  // inside a miss whose data no spec's branch took: later ones
  return PyLong_FromLong(st->loaded->select(call));
}

PyObject* scm_select_by_guards(PyObject* py_self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  ScmState* st = reinterpret_cast<ScmObject*>(py_self)->st;
  FlatArgs flat;
  if (!flatten_args(args, PyVectorcall_NARGS(nargsf), kwnames, flat) || !st->loaded) return PyLong_FromLong(-1);
  trd_call call = make_call(flat);
  call.after = t_branch_missed_after;
  return PyLong_FromLong(
      runtime::LoadedModule::by_guards(st->loaded->specs(), st->loaded->reuse_state(), checks_of(st->module.specs))
          ->select(call));
}

PyMethodDef scm_methods[] = {
    {"add_spec", scm_add_spec, METH_O, "Add one specialization (host IR text); rebuilds and loads the module."},
    {"set_state", scm_set_state, METH_O, "Set the captured module state tensors (parameters, buffers)."},
    {"clear", scm_clear, METH_NOARGS, "Drop every specialization."},
    {"counters", scm_counters, METH_NOARGS, "hits, misses, compiles, specializations, fallbacks, ..."},
    {"note_fallback", scm_note_fallback, METH_NOARGS, "Count one call the Python layer ran eagerly."},
    {"spec_runs", scm_spec_runs, METH_NOARGS, "[runs of each specialization]."},
    {"branch_missed", scm_branch_missed, METH_NOARGS, "Whether the miss being handled took an untraced branch."},
    {"graph_notes", scm_graph_notes, METH_NOARGS, "[(spec, kind, why)]: what keeps specs' graphs from serving every call."},
    {"graph_recaptures", scm_graph_recaptures, METH_NOARGS,
     "[(spec, what, count, last)]: why calls captured graphs of their own beside one their spec held."},
    {"ir", scm_ir, METH_NOARGS, "Host IR of every specialization (after planning)."},
    {"paths", scm_paths, METH_NOARGS, "(generated source path, shared object path) of the spec added last."},
    {"selector_paths", scm_selector_paths, METH_NOARGS, "(generated source path, shared object path) of the selector."},
    {"explain_call", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(scm_explain_call)),
     METH_FASTCALL | METH_KEYWORDS, "For each specialization, the first guard this call fails ('' if none)."},
    {"select", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(scm_select)), METH_FASTCALL | METH_KEYWORDS,
     "The specialization the decision program picks for these arguments, or -1."},
    {"select_by_guards", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(scm_select_by_guards)),
     METH_FASTCALL | METH_KEYWORDS, "The specialization the guards interpreted in order select (-1 if none)."},
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

void bump_state_epoch() { ++scm::g_state_epoch; }

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
