// A Specialization Cache Module loaded into the process: the dlopen'd object, its call sites
// resolved against the dispatcher, and its output trees parsed. Immutable once loaded, so a call in
// one thread can keep using it while another thread installs its successor.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "codegen/trident_abi.h"
#include "ir/ir.h"
#include "runtime/aten_site.h"
#include "runtime/frame.h"
#include "runtime/spec_graphs.h"
#include "runtime/triton_launch.h"

namespace trident::runtime {

struct ModuleLoadError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class LoadedModule {
 public:
  // Loads `so_path`; checks the ABI version; resolves every site. The object is never unloaded:
  // a module is small and a call in flight may still be inside it. `ir`, the module it was built
  // from, gives each spec's `writes` and `graph off` to its graphs (none given: graphs never start).
  static std::shared_ptr<LoadedModule> load(const std::string& so_path, const ir::Module* ir = nullptr);

  int32_t select(const trd_call& call) const { return m_->select(&call); }
  int32_t num_specs() const { return m_->nspecs; }
  int32_t num_slots(int32_t spec) const { return m_->nslots[spec]; }
  int32_t num_out_ints(int32_t spec) const { return m_->nout_ints[spec]; }
  const ir::Operand& output_tree(int32_t spec) const { return outputs_[spec]; }
  // Call site k is ATen (aten_site(k) valid) or a Triton launch (launch_site(k) valid).
  bool is_launch(int32_t k) const { return site_index_[k] < 0; }
  const AtenSite& aten_site(int32_t k) const { return sites_[site_index_[k]]; }
  const LaunchSite& launch_site(int32_t k) const { return launches_[-site_index_[k] - 1]; }
  const KernelInfo& kernel(int32_t k) const { return *kernels_[k]; }
  const std::string& path() const { return path_; }

  // Runs the host program of `spec`. Returns false with f.error set when an op or launch failed.
  bool run(int32_t spec, trd_frame& f, const trd_leaf* leaves, int64_t* out_ints) const;
  // After a run whose frame is gone: kept buffers still held elsewhere (an output, or a view of one)
  // leave the pool, and the sites that handed them out stop reusing; with recycle_outputs the pool
  // keeps their memory for when the caller lets go of it (buffer_reuse.h).
  void finish_run(bool recycle_outputs) const;

  ReusePool& reuse_pool() const { return reuse_pool_; }
  // How the bindings run a spec (python/bindings/scm_object.cpp: run_spec): whether its runs have
  // proved long enough to be worth letting other Python threads in for, and a count of runs that
  // decides which runs are timed. Read and written only by a thread holding the GIL.
  struct RunPolicy {
    uint32_t runs = 0;
    uint32_t long_in_a_row = 0;  // timed runs past the bindings' threshold, consecutively
    bool release_gil = false;
  };
  RunPolicy& run_policy(int32_t spec) const { return run_policy_[spec]; }
  // The spec's CUDA graphs (graph mode, spec_graphs.h); used under the SCM's run lock.
  SpecGraphs& graphs(int32_t spec) const { return *graphs_[spec]; }
  GraphStats graph_stats() const;
  // Each spec that stopped using graphs, with why (explain).
  std::vector<std::pair<int32_t, std::string>> graph_refusals() const;
  struct ReuseStats {
    int64_t holding = 0, escaped = 0, bytes = 0, recycled = 0;
  };
  ReuseStats reuse_stats() const;
  // GEMM sites running through cuBLASLt (checked against at::mm), and sites that handed back to ATen.
  struct GemmStats {
    int64_t native = 0, declined = 0, replayed = 0;
  };
  GemmStats gemm_stats() const;
  // Sites whose ATen call may replay its recorded launches (op_replay.h), and those replaying now.
  struct ReplayStats {
    int64_t sites = 0, replaying = 0;
  };
  ReplayStats replay_stats() const;

 private:
  std::string path_;
  const trd_module* m_ = nullptr;
  std::vector<AtenSite> sites_;
  std::vector<LaunchSite> launches_;
  std::vector<int32_t> site_index_;  // >= 0: index into sites_; < 0: -(index into launches_) - 1
  std::vector<std::unique_ptr<KernelInfo>> kernels_;
  std::vector<ir::Operand> outputs_;
  mutable ReusePool reuse_pool_;  // shared by all specs' allocation sites
  mutable std::vector<RunPolicy> run_policy_;  // per spec, sized at load
  std::vector<std::unique_ptr<SpecGraphs>> graphs_;  // per spec, made at load
};

// The function table generated code calls (rt_table.cpp).
const trd_rt* runtime_table();

}  // namespace trident::runtime
