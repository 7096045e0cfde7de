// One specialization's object loaded into the process: its host program, its call sites resolved
// against the dispatcher, its kernels and its output tree, with the runtime state the sites keep
// from call to call (cuBLASLt plans, recorded launches, kept-buffer hints, CUDA graphs). A module
// (loaded_module.h) is a selector and a list of these; adding a specialization loads only its own
// object, and the module that replaces the old one shares the other specs' objects and state.
#pragma once

#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "abi/trident_abi.h"
#include "ir/ir.h"
#include "runtime/aten/aten_site.h"
#include "runtime/memory/buffer_reuse.h"
#include "runtime/module/frame.h"
#include "runtime/graphs/spec_graphs.h"
#include "runtime/launch/triton_launch.h"

namespace trident::runtime {

struct ModuleLoadError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The entry point `symbol` of the object at `path`, dlopen'd for good; throws ModuleLoadError.
void* object_entry(const std::string& path, const char* symbol);

// Throws ModuleLoadError unless an object at `path` speaks this runtime's ABI.
void check_abi(const std::string& path, uint32_t version);

// What the specs of one module share for reusing buffers: the pool, and the kinds its allocation
// sites are sorted into (sites of one kind make the same result from the same key). Lives as long as
// any module of the spec family: from the first spec to a clear().
struct ReuseState {
  ReusePool pool;
  std::map<std::string, int32_t> kinds;  // reuse_signature -> kind
};

class LoadedSpec {
 public:
  // The host IR text that describes an object's sites, kernels and output tree (the emitter's,
  // codegen/emit_c.h): the object holds code only, so that it is the same in every process.
  struct Described {
    const std::vector<std::string>& sites;
    const std::vector<std::string>& kernels;
    const std::string& output;
  };
  // Loads `so_path` (a trident_spec_v1 object) described by `text`; checks the ABI version and that
  // the two agree; resolves every site, sorting allocation sites into `reuse`'s kinds. `ir` gives the
  // spec's `writes` and `graph off` to its graphs. The object is never unloaded: it is small and a
  // call in flight may still be inside it.
  static std::shared_ptr<LoadedSpec> load(const std::string& so_path, const ir::Spec& ir, const Described& text,
                                          ReuseState& reuse);

  int32_t num_slots() const { return m_->nslots; }
  int32_t num_out_ints() const { return m_->nout_ints; }
  const ir::Operand& output_tree() const { return output_; }
  trd_run_fn program() const { return m_->run; }
  // Call site k is ATen (aten_site(k) valid) or a Triton launch (launch_site(k) valid).
  bool is_launch(int32_t k) const { return site_index_[k] < 0; }
  const AtenSite& aten_site(int32_t k) const { return sites_[site_index_[k]]; }
  const LaunchSite& launch_site(int32_t k) const { return launches_[-site_index_[k] - 1]; }
  const KernelInfo& kernel(int32_t k) const { return *kernels_[k]; }
  const std::vector<AtenSite>& aten_sites() const { return sites_; }
  const std::string& path() const { return path_; }

  // How the bindings run the spec (python/bindings/scm_call.cpp: run_spec): whether its runs have
  // proved long enough to be worth letting other Python threads in for, and a count of runs that
  // decides which runs are timed. Read and written only by a thread holding the GIL.
  struct RunPolicy {
    uint32_t runs = 0;
    uint32_t long_in_a_row = 0;  // timed runs past the bindings' threshold, consecutively
    bool release_gil = false;
  };
  RunPolicy& run_policy() const { return run_policy_; }
  // The spec's CUDA graphs (graph mode, spec_graphs.h); used under the SCM's run lock.
  SpecGraphs& graphs() const { return *graphs_; }

 private:
  std::string path_;
  const trd_spec* m_ = nullptr;
  std::vector<AtenSite> sites_;
  std::vector<LaunchSite> launches_;
  std::vector<int32_t> site_index_;  // >= 0: index into sites_; < 0: -(index into launches_) - 1
  std::vector<std::unique_ptr<KernelInfo>> kernels_;
  ir::Operand output_;
  mutable RunPolicy run_policy_;
  std::unique_ptr<SpecGraphs> graphs_;
};

}  // namespace trident::runtime
