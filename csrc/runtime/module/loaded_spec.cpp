#include "runtime/module/loaded_spec.h"
#include "common/errors.h"

#include <algorithm>
#include <dlfcn.h>

#include "ir/text.h"
#include "runtime/graphs/direct_results.h"
#include "runtime/graphs/scalar_patch.h"
#include "runtime/replay/op_replay.h"

namespace trident::runtime {

void* object_entry(const std::string& path, const char* symbol) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) throw ModuleLoadError(std::string("cannot load module: ") + dlerror());
  void* entry = dlsym(h, symbol);
  if (!entry) throw ModuleLoadError(path + " has no " + symbol + " entry point");
  return entry;
}

void check_abi(const std::string& path, uint32_t version) {
  if (version != TRD_ABI_VERSION)
    throw ModuleLoadError(path + " was built for ABI " + std::to_string(version) + ", this runtime speaks " +
                          std::to_string(TRD_ABI_VERSION));
}

std::shared_ptr<LoadedSpec> LoadedSpec::load(const std::string& so_path, const ir::Spec& ir, const Described& text,
                                             ReuseState& reuse) {
  auto spec = std::make_shared<LoadedSpec>();
  spec->path_ = so_path;
  spec->m_ = reinterpret_cast<trd_spec_entry_fn>(object_entry(so_path, TRD_SPEC_ENTRY))();
  check_abi(so_path, spec->m_->abi_version);
  TRD_INTERNAL_ASSERT(spec->m_->nsites == static_cast<int32_t>(text.sites.size()) &&
                          spec->m_->nkernels == static_cast<int32_t>(text.kernels.size()),
                      so_path + " names " + std::to_string(spec->m_->nsites) + " sites and " +
                          std::to_string(spec->m_->nkernels) + " kernels, its description " +
                          std::to_string(text.sites.size()) + " and " + std::to_string(text.kernels.size()));
  for (const auto& kernel : text.kernels)
    spec->kernels_.push_back(std::make_unique<KernelInfo>(ir::parse_kernel(kernel)));
  std::vector<ir::Instr> site_instrs;
  for (size_t k = 0; k < text.sites.size(); ++k) {
    const ir::Instr& in = site_instrs.emplace_back(ir::parse_instr(text.sites[k]));
    if (in.kind == ir::Instr::Kind::Launch) {
      TRD_INTERNAL_ASSERT(in.a >= 0 && in.a < static_cast<int64_t>(spec->kernels_.size()),
                          "site " + std::to_string(k) + " launches an undeclared kernel");
      spec->launches_.push_back(resolve_launch(in, *spec->kernels_[in.a]));
      spec->site_index_.push_back(-static_cast<int32_t>(spec->launches_.size()));
    } else {
      spec->sites_.push_back(resolve_site(in));
      spec->sites_.back().hook = OpReplay::for_site(spec->sites_.back());  // nullptr: no replay
      spec->site_index_.push_back(static_cast<int32_t>(spec->sites_.size() - 1));
    }
  }
  spec->output_ = ir::parse_operand(text.output);
  // A program with collectives waits on other processes: its runs let other Python threads in from
  // the first (holding the GIL across a wait on peers deadlocked a Gloo all-reduce under load).
  // Nor is it captured as a CUDA graph (spec_graphs.h): what a captured collective reads and writes is
  // held in the communicator's own work records, which the rebind check cannot see, and a one-rank
  // all-reduce replayed from a graph returned wrong results (test_distributed_gpu.py).
  std::string graph_off = ir.graph_off;
  for (const auto& site : spec->sites_)
    if (site.name.rfind("_c10d_functional::", 0) == 0 || site.name.rfind("c10d::", 0) == 0) {
      spec->run_policy_.release_gil = true;
      if (graph_off.empty()) graph_off = "a collective (" + site.name + "), whose buffers the communicator holds";
    }
  for (auto& site : spec->sites_)
    if (site.may_reuse())
      site.reuse.kind =
          reuse.kinds.emplace(reuse_signature(site), static_cast<int32_t>(reuse.kinds.size())).first->second;
  // A graph's results share one reuse kind: their keys hold all of a result's metadata.
  const int32_t result_kind = reuse.kinds.emplace("graph result", static_cast<int32_t>(reuse.kinds.size())).first->second;
  std::vector<ir::Kernel> kernel_decls;
  for (const auto& k : spec->kernels_) kernel_decls.push_back(k->decl());
  // A program that branches on data (`expect`) is not split at its reads (spec_graphs.h, Segments).
  const bool branches = std::any_of(ir.body.begin(), ir.body.end(), [](const ir::Instr& in) {
    return in.kind == ir::Instr::Kind::Check && in.b == 1;
  });
  spec->graphs_ = std::make_unique<SpecGraphs>(ir.writes, graph_off, result_kind, ScalarPatch::keyed_by(ir),
                                               direct_results(site_instrs, kernel_decls, spec->output_), ir.host_read,
                                               branches);
  return spec;
}

}  // namespace trident::runtime
