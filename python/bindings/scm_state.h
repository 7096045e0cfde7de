// The state behind a trident._C.SCM object, shared by its hot path (scm_call.cpp: the call itself)
// and its cold methods (scm_object.cpp: adding specializations, state, counters, explain).
#pragma once

#include <Python.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <ATen/core/Tensor.h>

#include "codegen/toolchain.h"
#include "flatten.h"
#include "ir/ir.h"
#include "runtime/module/loaded_module.h"
#include "selector_builds.h"

namespace trident::bindings::scm {

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
  // The selector still compiling for `loaded` (which interprets its guards meanwhile), with what
  // installing it needs; null when `loaded` runs its compiled selector (selector_builds.h).
  struct PendingSelector {
    std::shared_ptr<SelectorBuild> build;
    std::vector<std::vector<int64_t>> tables;  // the guard tables its code reads
  };
  std::unique_ptr<PendingSelector> pending_selector;
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
  // Of compile_seconds, what selectors compiled off the miss path took; and how many calls were
  // served by interpreted guards while one did.
  double background_compile_seconds = 0.0;
  uint64_t interpreted_selects = 0;
};

struct ScmObject {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  ScmState* st;
  PyObject* weakrefs;
};

extern uint64_t g_state_epoch;  // bumped on any module state change (trident/_state.py)

// The specialization this thread's call found its data's branch missing in last (run_spec), while
// the miss handler runs; -1 otherwise.
extern thread_local int32_t t_branch_missed_after;

bool same_leaf_meta(const trd_leaf& a, const trd_leaf& b);

// The hot path: flatten, check state, select, run, wrap the outputs (scm_call.cpp).
PyObject* scm_vectorcall(PyObject* callable, PyObject* const* args, size_t nargsf, PyObject* kwnames);

// Installs the selector compiled for st->loaded once its build is done (wait: waiting up to a
// minute for it), replacing the module that interprets its guards (selector_builds.h). False only
// with a Python exception set (a warning filter made its warning one). With the GIL held.
bool install_selector(ScmState* st, bool wait);

}  // namespace trident::bindings::scm
