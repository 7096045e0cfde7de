#include "runtime/loaded_module.h"

#include <dlfcn.h>

#include <map>

#include "ir/text.h"
#include "runtime/op_replay.h"

namespace trident::runtime {

std::shared_ptr<LoadedModule> LoadedModule::load(const std::string& so_path, const ir::Module* ir) {
  void* h = dlopen(so_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) throw ModuleLoadError(std::string("cannot load module: ") + dlerror());
  auto entry = reinterpret_cast<trd_module_entry_fn>(dlsym(h, TRD_MODULE_ENTRY));
  if (!entry) throw ModuleLoadError(so_path + " has no " TRD_MODULE_ENTRY " entry point");
  auto mod = std::make_shared<LoadedModule>();
  mod->path_ = so_path;
  mod->m_ = entry();
  if (mod->m_->abi_version != TRD_ABI_VERSION)
    throw ModuleLoadError(so_path + " was built for ABI " + std::to_string(mod->m_->abi_version) +
                          ", this runtime speaks " + std::to_string(TRD_ABI_VERSION));
  for (int32_t k = 0; k < mod->m_->nkernels; ++k)
    mod->kernels_.push_back(std::make_unique<KernelInfo>(ir::parse_kernel(mod->m_->kernels[k])));
  for (int32_t k = 0; k < mod->m_->nsites; ++k) {
    ir::Instr in = ir::parse_instr(mod->m_->sites[k]);
    if (in.kind == ir::Instr::Kind::Launch) {
      if (in.a < 0 || in.a >= static_cast<int64_t>(mod->kernels_.size()))
        throw ModuleLoadError("site " + std::to_string(k) + " launches an undeclared kernel");
      mod->launches_.push_back(resolve_launch(in, *mod->kernels_[in.a]));
      mod->site_index_.push_back(-static_cast<int32_t>(mod->launches_.size()));
    } else {
      mod->sites_.push_back(resolve_site(in));
      mod->site_index_.push_back(static_cast<int32_t>(mod->sites_.size() - 1));
    }
  }
  for (int32_t s = 0; s < mod->m_->nspecs; ++s) mod->outputs_.push_back(ir::parse_operand(mod->m_->outputs[s]));
  mod->run_policy_.resize(static_cast<size_t>(mod->m_->nspecs));
  for (int32_t s = 0; s < mod->m_->nspecs; ++s) {
    const bool known = ir && s < static_cast<int32_t>(ir->specs.size());
    mod->graphs_.push_back(std::make_unique<SpecGraphs>(
        known ? ir->specs[s].writes : std::vector<int32_t>{},
        known ? ir->specs[s].graph_off : std::string("the module was loaded without its host IR")));
  }
  std::map<std::string, int32_t> kinds;  // reuse_signature -> ReusePool kind
  for (auto& site : mod->sites_)
    if (site.may_reuse())
      site.reuse.kind = kinds.emplace(reuse_signature(site), static_cast<int32_t>(kinds.size())).first->second;
  return mod;
}

bool LoadedModule::run(int32_t spec, trd_frame& f, const trd_leaf* leaves, int64_t* out_ints) const {
  f.module = this;
  return m_->run[spec](runtime_table(), &f, leaves, out_ints) == 0;
}

void LoadedModule::finish_run(bool recycle_outputs) const { reuse_pool_.check_escapes(recycle_outputs); }

LoadedModule::ReuseStats LoadedModule::reuse_stats() const {
  ReuseStats r;
  for (const auto& site : sites_) r.escaped += site.reuse.escaped;
  r.holding = reuse_pool_.buffers();
  r.bytes = reuse_pool_.bytes();
  r.recycled = reuse_pool_.recycled();
  return r;
}

LoadedModule::GemmStats LoadedModule::gemm_stats() const {
  GemmStats g;
  for (const auto& site : sites_) {
    if (!site.gemm) continue;
    g.native += site.gemm->state() == LtGemm::State::Ready;
    g.declined += site.gemm->state() == LtGemm::State::Declined;
    g.replayed += site.gemm->replaying();
  }
  return g;
}

GraphStats LoadedModule::graph_stats() const {
  GraphStats g;
  for (const auto& spec : graphs_) {
    const GraphStats s = spec->stats();
    g.graphs += s.graphs;
    g.captures += s.captures;
    g.replays += s.replays;
  }
  return g;
}

std::vector<std::pair<int32_t, std::string>> LoadedModule::graph_refusals() const {
  std::vector<std::pair<int32_t, std::string>> out;
  for (size_t s = 0; s < graphs_.size(); ++s)
    if (graphs_[s]->stopped()) out.emplace_back(static_cast<int32_t>(s), graphs_[s]->why());
  return out;
}

LoadedModule::ReplayStats LoadedModule::replay_stats() const {
  ReplayStats r;
  for (const auto& site : sites_) {
    if (!site.replay) continue;
    ++r.sites;
    r.replaying += site.replay->replaying();
  }
  return r;
}

}  // namespace trident::runtime
