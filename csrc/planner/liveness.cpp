#include "planner/liveness.h"

#include <map>
#include <set>

namespace trident::planner {
namespace {

void collect(const ir::Operand& o, std::set<int64_t>& out) {
  if (o.kind == ir::Operand::Kind::Value) out.insert(o.i);
  for (const auto& it : o.items) collect(it, out);
}

}  // namespace

void insert_releases(ir::Spec& spec) {
  using K = ir::Instr::Kind;
  std::vector<ir::Instr> body;
  for (auto& in : spec.body)
    if (in.kind != K::Release) body.push_back(std::move(in));

  std::set<int64_t> owned;                 // values whose slot the frame owns
  std::map<int64_t, size_t> last_use;      // value -> index of the last instruction using it
  std::set<int64_t> returned;
  for (size_t k = 0; k < body.size(); ++k) {
    const auto& in = body[k];
    std::set<int64_t> used;
    for (const auto& o : in.operands) collect(o, used);
    for (const auto& o : in.grid) collect(o, used);
    if (in.kind == K::SymSize || in.kind == K::SymStride || in.kind == K::Item) used.insert(in.a);
    for (int64_t v : used) last_use[v] = k;
    if (in.kind == K::Return) returned = used;
    if (in.kind == K::Call || in.kind == K::Launch)
      for (int64_t r : in.results) { owned.insert(r); last_use.emplace(r, k); }
  }

  std::map<size_t, std::vector<int64_t>> release_after;
  for (int64_t v : owned)
    if (!returned.count(v)) release_after[last_use[v]].push_back(v);

  spec.body.clear();
  for (size_t k = 0; k < body.size(); ++k) {
    spec.body.push_back(std::move(body[k]));
    for (int64_t v : release_after[k]) {
      ir::Instr r;
      r.kind = K::Release;
      r.a = v;
      spec.body.push_back(r);
    }
  }
}

}  // namespace trident::planner
