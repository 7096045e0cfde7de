// Typed entry points for the hottest ATen ops: at::_ops::<op>::call with arguments taken straight
// from the frame, skipping IValue boxing. Chosen per site at load time, only when every operand
// has the plan the typed call expects; anything else stays on the boxed path, which serves all ops.
#include <ATen/core/Tensor.h>
#include <ATen/ops/add_ops.h>
#include <ATen/ops/addmm_ops.h>
#include <ATen/ops/bmm_ops.h>
#include <ATen/ops/mm_ops.h>
#include <ATen/ops/mul_ops.h>
#include <ATen/ops/view_ops.h>

#include <cstring>

#include "runtime/aten_site.h"

namespace trident::runtime {
namespace {

using P = ArgPlan::Kind;

bool plans_are(const AtenSite& s, std::initializer_list<P> kinds) {
  if (s.args.size() != kinds.size()) return false;
  size_t k = 0;
  for (P want : kinds)
    if (s.args[k++].kind != want) return false;
  return true;
}

void mm(const AtenSite& s, trd_frame& f, const int64_t*) {
  s.set_result(f, 0, at::_ops::mm::call(s.tensor(f, 0), s.tensor(f, 1)));
}
void bmm(const AtenSite& s, trd_frame& f, const int64_t*) {
  s.set_result(f, 0, at::_ops::bmm::call(s.tensor(f, 0), s.tensor(f, 1)));
}
void addmm(const AtenSite& s, trd_frame& f, const int64_t*) {
  s.set_result(f, 0, at::_ops::addmm::call(s.tensor(f, 0), s.tensor(f, 1), s.tensor(f, 2),
                                           s.args[3].constant.toScalar(), s.args[4].constant.toScalar()));
}
void add_tensor(const AtenSite& s, trd_frame& f, const int64_t*) {
  s.set_result(f, 0, at::_ops::add_Tensor::call(s.tensor(f, 0), s.tensor(f, 1), s.args[2].constant.toScalar()));
}
void mul_tensor(const AtenSite& s, trd_frame& f, const int64_t*) {
  s.set_result(f, 0, at::_ops::mul_Tensor::call(s.tensor(f, 0), s.tensor(f, 1)));
}
void view_const(const AtenSite& s, trd_frame& f, const int64_t*) {
  // The size list is a constant IValue built at load; toIntVector is a small copy, no boxing.
  const auto sizes = s.args[1].constant.toIntList();
  c10::SmallVector<c10::SymInt, 6> sym;
  for (int64_t v : sizes) sym.emplace_back(v);
  s.set_result(f, 0, at::_ops::view::call(s.tensor(f, 0), sym));
}

}  // namespace

TypedFn find_typed(const AtenSite& site) {
  const std::string& n = site.name;
  if (n == "aten::mm" && plans_are(site, {P::Tensor, P::Tensor})) return mm;
  if (n == "aten::bmm" && plans_are(site, {P::Tensor, P::Tensor})) return bmm;
  if (n == "aten::addmm" && plans_are(site, {P::Tensor, P::Tensor, P::Tensor, P::Const, P::Const})) return addmm;
  if (n == "aten::add.Tensor" && plans_are(site, {P::Tensor, P::Tensor, P::Const})) return add_tensor;
  if (n == "aten::mul.Tensor" && plans_are(site, {P::Tensor, P::Tensor})) return mul_tensor;
  if (n == "aten::view" && plans_are(site, {P::Tensor, P::Const})) return view_const;
  return nullptr;
}

}  // namespace trident::runtime
