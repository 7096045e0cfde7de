// A Specialization Cache Module loaded into the process: the selector's object (the decision
// program) and one loaded object per specialization (loaded_spec.h). Immutable once assembled, so a
// call in one thread can keep using it while another thread installs its successor; the successor
// shares the specs it keeps (their objects, resolved sites and per-site state) and the buffer pool.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "abi/trident_abi.h"
#include "ir/ir.h"
#include "runtime/module/frame.h"
#include "runtime/module/loaded_spec.h"

namespace trident::runtime {

class LoadedModule {
 public:
  // Loads the selector object at `selector_path` over `specs` (in spec order, sharing `reuse`) with
  // the guard tables its code reads (guards/decision.h); checks that the ids its code names are
  // among them and that it reads that many tables.
  static std::shared_ptr<LoadedModule> assemble(const std::string& selector_path,
                                                std::vector<std::shared_ptr<LoadedSpec>> specs,
                                                std::shared_ptr<ReuseState> reuse,
                                                std::vector<std::vector<int64_t>> tables);

  // The same module before its selector object exists: each spec's checks (`checks`, in spec order:
  // its structure and guards, nothing else needed) are evaluated one spec after another
  // (guards/explain.h's accepts, which the decision program mirrors), so calls are served while
  // the selector compiles.
  static std::shared_ptr<LoadedModule> by_guards(std::vector<std::shared_ptr<LoadedSpec>> specs,
                                                 std::shared_ptr<ReuseState> reuse, std::vector<ir::Spec> checks);

  // The decision program over `call`, with this module's guard tables (an object may be shared by
  // modules whose state lives elsewhere: the tables are the module's, not the object's): the lowest
  // spec id above call.after whose guards all hold, or -1.
  int32_t select(const trd_call& call) const {
    if (!selector_) return select_by_guards(call);
    trd_call c = call;
    c.tables = table_ptrs_.data();
    return selector_->select(&c);
  }
  // Whether select() interprets guards (by_guards) rather than running a compiled selector.
  bool interprets_guards() const { return !selector_; }
  int32_t num_specs() const { return static_cast<int32_t>(specs_.size()); }
  const LoadedSpec& spec(int32_t k) const { return *specs_[k]; }
  const std::vector<std::shared_ptr<LoadedSpec>>& specs() const { return specs_; }
  const std::shared_ptr<ReuseState>& reuse_state() const { return reuse_; }
  int32_t num_slots(int32_t spec) const { return specs_[spec]->num_slots(); }
  int32_t num_out_ints(int32_t spec) const { return specs_[spec]->num_out_ints(); }
  const ir::Operand& output_tree(int32_t spec) const { return specs_[spec]->output_tree(); }
  const std::string& selector_path() const { return selector_path_; }

  // Runs the host program of `spec`. Returns false with f.error set when an op or launch failed.
  bool run(int32_t spec, trd_frame& f, const trd_leaf* leaves, int64_t* out_ints) const;
  // After a run whose frame is gone: kept buffers still held elsewhere (an output, or a view of one)
  // leave the pool, and the sites that handed them out stop reusing; with recycle_outputs the pool
  // keeps their memory for when the caller lets go of it (buffer_reuse.h).
  void finish_run(bool recycle_outputs) const;

  LoadedSpec::RunPolicy& run_policy(int32_t spec) const { return specs_[spec]->run_policy(); }
  SpecGraphs& graphs(int32_t spec) const { return specs_[spec]->graphs(); }
  GraphStats graph_stats() const;
  // Per spec with something to say about its graphs (explain): (spec, kind, why). kind: "stopped" (its runs never replay), "addresses" (graphs keyed by their arguments'
  // addresses) or "scalars" (keyed by their ints' and floats' values).
  struct GraphNote {
    int32_t spec;
    const char* kind;
    std::string why;
  };
  std::vector<GraphNote> graph_notes() const;
  // Per spec, why calls captured graphs of their own (SpecGraphs::recaptures).
  struct GraphRecapture {
    int32_t spec;
    SpecGraphs::Recapture why;
  };
  std::vector<GraphRecapture> graph_recaptures() const;
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
  int32_t select_by_guards(const trd_call& call) const;

  std::string selector_path_;
  std::vector<ir::Spec> checks_;  // by_guards: per spec, its structure and guards
  const trd_selector* selector_ = nullptr;
  std::vector<std::vector<int64_t>> tables_;
  std::vector<const int64_t*> table_ptrs_;  // into tables_, as trd_call.tables
  std::vector<std::shared_ptr<LoadedSpec>> specs_;
  std::shared_ptr<ReuseState> reuse_;  // shared by all specs' allocation sites
};

// The function table generated code calls (rt_table.cpp).
const trd_rt* runtime_table();

}  // namespace trident::runtime
