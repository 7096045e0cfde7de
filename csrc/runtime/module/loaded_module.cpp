#include "runtime/module/loaded_module.h"

#include "common/errors.h"

#include <algorithm>

#include "guards/explain.h"

#include "runtime/gemm/lt_gemm.h"
#include "runtime/replay/op_replay.h"

namespace trident::runtime {

std::shared_ptr<LoadedModule> LoadedModule::assemble(const std::string& selector_path,
                                                     std::vector<std::shared_ptr<LoadedSpec>> specs,
                                                     std::shared_ptr<ReuseState> reuse,
                                                     std::vector<std::vector<int64_t>> tables) {
  auto mod = std::make_shared<LoadedModule>();
  mod->selector_path_ = selector_path;
  mod->selector_ = reinterpret_cast<trd_selector_entry_fn>(object_entry(selector_path, TRD_SELECTOR_ENTRY))();
  check_abi(selector_path, mod->selector_->abi_version);
  TRD_INTERNAL_ASSERT(mod->selector_->nspecs <= static_cast<int32_t>(specs.size()),
                      selector_path + " names specializations up to " + std::to_string(mod->selector_->nspecs) +
                          ", the module has " + std::to_string(specs.size()));
  TRD_INTERNAL_ASSERT(mod->selector_->ntables == static_cast<int32_t>(tables.size()),
                      selector_path + " reads " + std::to_string(mod->selector_->ntables) + " guard tables, " +
                          std::to_string(tables.size()) + " were emitted with it");
  mod->tables_ = std::move(tables);
  for (const auto& t : mod->tables_) mod->table_ptrs_.push_back(t.data());
  mod->specs_ = std::move(specs);
  mod->reuse_ = std::move(reuse);
  return mod;
}

std::shared_ptr<LoadedModule> LoadedModule::by_guards(std::vector<std::shared_ptr<LoadedSpec>> specs,
                                                      std::shared_ptr<ReuseState> reuse, std::vector<ir::Spec> checks) {
  TRD_INTERNAL_ASSERT(checks.size() == specs.size(), "one spec's checks per loaded spec");
  auto mod = std::make_shared<LoadedModule>();
  mod->checks_ = std::move(checks);
  mod->specs_ = std::move(specs);
  mod->reuse_ = std::move(reuse);
  return mod;
}

int32_t LoadedModule::select_by_guards(const trd_call& call) const {
  for (int32_t k = std::max(call.after + 1, 0); k < static_cast<int32_t>(checks_.size()); ++k)
    if (guards::accepts(checks_[k], call)) return k;
  return -1;
}

bool LoadedModule::run(int32_t spec, trd_frame& f, const trd_leaf* leaves, int64_t* out_ints) const {
  f.spec = specs_[spec].get();
  f.pool = &reuse_->pool;
  return specs_[spec]->program()(runtime_table(), &f, leaves, out_ints) == 0;
}

void LoadedModule::finish_run(bool recycle_outputs) const { reuse_->pool.check_escapes(recycle_outputs); }

GraphStats LoadedModule::graph_stats() const {
  GraphStats g;
  for (const auto& spec : specs_) {
    const GraphStats s = spec->graphs().stats();
    g.graphs += s.graphs;
    g.captures += s.captures;
    g.replays += s.replays;
    g.rebinds += s.rebinds;
    g.patches += s.patches;
    g.scalar_patches += s.scalar_patches;
    g.patched_nodes += s.patched_nodes;
    g.result_nodes += s.result_nodes;
    g.segments += s.segments;
    g.read_misses += s.read_misses;
  }
  return g;
}

std::vector<LoadedModule::GraphRecapture> LoadedModule::graph_recaptures() const {
  std::vector<GraphRecapture> out;
  for (size_t s = 0; s < specs_.size(); ++s)
    for (const auto& r : specs_[s]->graphs().recaptures()) out.push_back({static_cast<int32_t>(s), r});
  return out;
}

std::vector<LoadedModule::GraphNote> LoadedModule::graph_notes() const {
  std::vector<GraphNote> out;
  for (size_t s = 0; s < specs_.size(); ++s) {
    const SpecGraphs& g = specs_[s]->graphs();
    if (g.stopped()) {
      out.push_back({static_cast<int32_t>(s), "stopped", g.why()});
      continue;
    }
    if (!g.keyed_by_address().empty()) out.push_back({static_cast<int32_t>(s), "addresses", g.keyed_by_address()});
    if (!g.segmented_at().empty()) out.push_back({static_cast<int32_t>(s), "segments", g.segmented_at()});
    else if (!g.scalars_keyed().empty()) out.push_back({static_cast<int32_t>(s), "scalars", g.scalars_keyed()});
  }
  return out;
}

LoadedModule::ReuseStats LoadedModule::reuse_stats() const {
  ReuseStats r;
  for (const auto& spec : specs_)
    for (const auto& site : spec->aten_sites()) r.escaped += site.reuse.escaped;
  r.holding = reuse_->pool.buffers();
  r.bytes = reuse_->pool.bytes();
  r.recycled = reuse_->pool.recycled();
  return r;
}

LoadedModule::GemmStats LoadedModule::gemm_stats() const {
  GemmStats g;
  for (const auto& spec : specs_)
    for (const auto& site : spec->aten_sites()) {
      if (!site.gemm) continue;
      g.native += site.gemm->state() == LtGemm::State::Ready;
      g.declined += site.gemm->state() == LtGemm::State::Declined;
      g.replayed += site.gemm->replaying();
    }
  return g;
}

LoadedModule::ReplayStats LoadedModule::replay_stats() const {
  ReplayStats r;
  for (const auto& spec : specs_)
    for (const auto& site : spec->aten_sites()) {
      const auto* replay = dynamic_cast<const OpReplay*>(site.hook.get());
      if (!replay) continue;
      ++r.sites;
      r.replaying += replay->replaying();
    }
  return r;
}

}  // namespace trident::runtime
