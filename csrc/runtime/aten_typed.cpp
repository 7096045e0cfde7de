// Typed entry points for the hottest ATen ops: at::_ops::<op>::call with arguments taken straight
// from the frame, skipping IValue boxing. Chosen per site at load time, only when every operand
// has the plan the typed call expects; anything else stays on the boxed path, which serves all ops.
#include <ATen/core/Tensor.h>
#include <ATen/ops/add_ops.h>
#include <ATen/ops/addmm_ops.h>
#include <ATen/ops/bmm_ops.h>
#include <ATen/ops/empty_like_ops.h>
#include <ATen/ops/empty_ops.h>
#include <ATen/ops/mm_ops.h>
#include <ATen/ops/mul_ops.h>
#include <ATen/ops/view_ops.h>
#include <ATen/ops/_unsafe_view_ops.h>
#include <ATen/ops/copy_ops.h>
#include <ATen/ops/expand_ops.h>
#include <ATen/ops/linear_ops.h>
#include <ATen/ops/permute_ops.h>
#include <ATen/ops/reshape_ops.h>
#include <ATen/ops/select_ops.h>
#include <ATen/ops/slice_ops.h>
#include <ATen/ops/t_ops.h>
#include <ATen/ops/transpose_ops.h>
#include <ATen/ops/unsqueeze_ops.h>

#include <cstring>
#include <optional>

#include "runtime/aten_site.h"

namespace trident::runtime {
namespace {

using P = ArgPlan::Kind;

bool plans_are_from(const AtenSite& s, size_t first, std::initializer_list<P> kinds) {
  if (s.args.size() != first + kinds.size()) return false;
  size_t k = first;
  for (P want : kinds)
    if (s.args[k++].kind != want) return false;
  return true;
}

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

template <typename T>
std::optional<T> opt_enum(const c10::IValue& v) {
  return v.isNone() ? std::nullopt : std::optional<T>(static_cast<T>(v.toInt()));
}
std::optional<c10::Device> opt_device(const c10::IValue& v) {
  return v.isNone() ? std::nullopt : std::optional<c10::Device>(v.toDevice());
}
std::optional<bool> opt_bool(const c10::IValue& v) {
  return v.isNone() ? std::nullopt : std::optional<bool>(v.toBool());
}

// Allocation before a Triton kernel is the commonest op of all: skip the boxed path for it.
void empty_like(const AtenSite& s, trd_frame& f, const int64_t*) {
  const auto& a = s.args;
  s.set_result(f, 0, at::_ops::empty_like::call(s.tensor(f, 0), opt_enum<at::ScalarType>(a[1].constant),
                                                opt_enum<at::Layout>(a[2].constant), opt_device(a[3].constant),
                                                opt_bool(a[4].constant), opt_enum<at::MemoryFormat>(a[5].constant)));
}
void empty_memory_format(const AtenSite& s, trd_frame& f, const int64_t* dyn) {
  const auto& a = s.args;
  c10::SmallVector<c10::SymInt, 6> sizes;
  if (a[0].kind == P::Const) {
    for (int64_t v : a[0].constant.toIntList()) sizes.emplace_back(v);
  } else {
    for (const auto& it : a[0].items) sizes.emplace_back(it.kind == ir::Operand::Kind::Sym ? dyn[it.i] : it.i);
  }
  s.set_result(f, 0, at::_ops::empty_memory_format::call(sizes, opt_enum<at::ScalarType>(a[1].constant),
                                                         opt_enum<at::Layout>(a[2].constant), opt_device(a[3].constant),
                                                         opt_bool(a[4].constant), opt_enum<at::MemoryFormat>(a[5].constant)));
}

// An int operand (constant or runtime) and an int list operand (constant or with runtime items).
bool is_int(const ArgPlan& p) { return p.kind == P::Sym || (p.kind == P::Const && p.constant.isInt()); }
bool is_int_list(const ArgPlan& p) { return p.kind == P::IntList || (p.kind == P::Const && p.constant.isIntList()); }
int64_t int_at(const AtenSite& s, size_t k, const int64_t* dyn) { return s.integer(k, dyn); }
c10::SmallVector<c10::SymInt, 6> sym_list(const AtenSite& s, size_t k, const int64_t* dyn) {
  c10::SmallVector<c10::SymInt, 6> out;
  const ArgPlan& p = s.args[k];
  if (p.kind == P::Const) {
    for (int64_t v : p.constant.toIntList()) out.emplace_back(v);
  } else {
    for (const auto& it : p.items) out.emplace_back(it.kind == ir::Operand::Kind::Sym ? dyn[it.i] : it.i);
  }
  return out;
}
c10::SmallVector<int64_t, 6> int_list(const AtenSite& s, size_t k, const int64_t* dyn) {
  c10::SmallVector<int64_t, 6> out;
  for (const auto& v : sym_list(s, k, dyn)) out.push_back(v.as_int_unchecked());
  return out;
}
std::optional<c10::SymInt> opt_sym(const AtenSite& s, size_t k, const int64_t* dyn) {
  const ArgPlan& p = s.args[k];
  if (p.kind == P::Const && p.constant.isNone()) return std::nullopt;
  return c10::SymInt(int_at(s, k, dyn));
}

void linear(const AtenSite& s, trd_frame& f, const int64_t*) {
  std::optional<at::Tensor> bias;
  if (s.args[2].kind == P::Tensor) bias = s.tensor(f, 2);
  s.set_result(f, 0, at::_ops::linear::call(s.tensor(f, 0), s.tensor(f, 1), bias));
}
void slice(const AtenSite& s, trd_frame& f, const int64_t* dyn) {
  s.set_result(f, 0, at::_ops::slice_Tensor::call(s.tensor(f, 0), int_at(s, 1, dyn), opt_sym(s, 2, dyn),
                                                  opt_sym(s, 3, dyn), c10::SymInt(int_at(s, 4, dyn))));
}
void select(const AtenSite& s, trd_frame& f, const int64_t* dyn) {
  s.set_result(f, 0, at::_ops::select_int::call(s.tensor(f, 0), int_at(s, 1, dyn), c10::SymInt(int_at(s, 2, dyn))));
}
void unsqueeze(const AtenSite& s, trd_frame& f, const int64_t* dyn) {
  s.set_result(f, 0, at::_ops::unsqueeze::call(s.tensor(f, 0), int_at(s, 1, dyn)));
}
void transpose(const AtenSite& s, trd_frame& f, const int64_t* dyn) {
  s.set_result(f, 0, at::_ops::transpose_int::call(s.tensor(f, 0), int_at(s, 1, dyn), int_at(s, 2, dyn)));
}
void t(const AtenSite& s, trd_frame& f, const int64_t*) { s.set_result(f, 0, at::_ops::t::call(s.tensor(f, 0))); }
void permute(const AtenSite& s, trd_frame& f, const int64_t* dyn) {
  s.set_result(f, 0, at::_ops::permute::call(s.tensor(f, 0), int_list(s, 1, dyn)));
}
void reshape(const AtenSite& s, trd_frame& f, const int64_t* dyn) {
  s.set_result(f, 0, at::_ops::reshape::call(s.tensor(f, 0), sym_list(s, 1, dyn)));
}
void view_dyn(const AtenSite& s, trd_frame& f, const int64_t* dyn) {
  s.set_result(f, 0, at::_ops::view::call(s.tensor(f, 0), sym_list(s, 1, dyn)));
}
void unsafe_view(const AtenSite& s, trd_frame& f, const int64_t* dyn) {
  s.set_result(f, 0, at::_ops::_unsafe_view::call(s.tensor(f, 0), sym_list(s, 1, dyn)));
}
void expand(const AtenSite& s, trd_frame& f, const int64_t* dyn) {
  s.set_result(f, 0, at::_ops::expand::call(s.tensor(f, 0), sym_list(s, 1, dyn), s.args[2].constant.toBool()));
}
void copy_inplace(const AtenSite& s, trd_frame& f, const int64_t*) {
  // The destination is an argument, state or a view slot; the op returns it.
  at::Tensor dst = s.tensor(f, 0);
  at::_ops::copy_::call(dst, s.tensor(f, 1), s.args[2].constant.toBool());
  s.set_result(f, 0, std::move(dst));
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
  const auto& a = site.args;
  auto tensor_at0 = a.size() >= 1 && a[0].kind == P::Tensor;
  if (n == "aten::linear" && a.size() == 3 && tensor_at0 && a[1].kind == P::Tensor &&
      (a[2].kind == P::Tensor || (a[2].kind == P::Const && a[2].constant.isNone())))
    return linear;
  if (n == "aten::slice.Tensor" && a.size() == 5 && tensor_at0 && is_int(a[1]) &&
      (is_int(a[2]) || (a[2].kind == P::Const && a[2].constant.isNone())) &&
      (is_int(a[3]) || (a[3].kind == P::Const && a[3].constant.isNone())) && is_int(a[4]))
    return slice;
  if (n == "aten::select.int" && a.size() == 3 && tensor_at0 && is_int(a[1]) && is_int(a[2])) return select;
  if (n == "aten::unsqueeze" && a.size() == 2 && tensor_at0 && is_int(a[1])) return unsqueeze;
  if (n == "aten::transpose.int" && a.size() == 3 && tensor_at0 && is_int(a[1]) && is_int(a[2])) return transpose;
  if (n == "aten::t" && a.size() == 1 && tensor_at0) return t;
  if (n == "aten::permute" && a.size() == 2 && tensor_at0 && is_int_list(a[1])) return permute;
  if (n == "aten::reshape" && a.size() == 2 && tensor_at0 && is_int_list(a[1])) return reshape;
  if (n == "aten::view" && a.size() == 2 && tensor_at0 && a[1].kind == P::IntList) return view_dyn;
  if (n == "aten::_unsafe_view" && a.size() == 2 && tensor_at0 && is_int_list(a[1])) return unsafe_view;
  if (n == "aten::expand" && a.size() == 3 && tensor_at0 && is_int_list(a[1]) && a[2].kind == P::Const)
    return expand;
  if (n == "aten::copy_" && a.size() == 3 && tensor_at0 && a[1].kind == P::Tensor && a[2].kind == P::Const)
    return copy_inplace;
  if (n == "aten::empty_like" && plans_are(site, {P::Tensor, P::Const, P::Const, P::Const, P::Const, P::Const}))
    return empty_like;
  if (n == "aten::empty.memory_format" && site.args.size() == 6 &&
      (site.args[0].kind == P::Const || site.args[0].kind == P::IntList) &&
      plans_are_from(site, 1, {P::Const, P::Const, P::Const, P::Const, P::Const}))
    return empty_memory_format;
  return nullptr;
}

}  // namespace trident::runtime
