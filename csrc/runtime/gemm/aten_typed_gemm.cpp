#include "runtime/gemm/aten_typed_gemm.h"

#include <ATen/EmptyTensor.h>
#include <ATen/ops/_unsafe_view_ops.h>
#include <ATen/ops/addmm_ops.h>
#include <ATen/ops/bmm_ops.h>
#include <ATen/ops/linear_ops.h>
#include <ATen/ops/mm_ops.h>
#include <ATen/ops/t_ops.h>
#include <ATen/ops/view_ops.h>
#include <c10/core/Allocator.h>

#include <atomic>
#include <optional>

#include "runtime/module/env_switch.h"
#include "runtime/gemm/lt_gemm.h"
#include "runtime/aten/typed_produce.h"

namespace trident::runtime::typed {
namespace {

bool mm_shapes(const at::Tensor& a, const at::Tensor& b) {
  return a.dim() == 2 && b.dim() == 2 && a.layout() == c10::kStrided && b.layout() == c10::kStrided;
}

// a @ b for 2-D a and b: through the site's cuBLASLt plan when it serves the call (lt_gemm.h: same
// bits as at::mm, less host time), else ATen. cuBLASLt only where no autograd history is recorded.
void mm_into(const AtenSite& s, trd_frame& f, const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  if (!(f.below_autograd && s.gemm && s.gemm->run(a, b, out))) at::_ops::mm_out::call(a, b, out);
}
// a @ b through the site's cuBLASLt plan into a fresh contiguous CUDA tensor of `sizes` (a's
// dtype, the current device): [M, N] for 2-D a, or a's leading sizes and N for a linear's N-D input.
// Undefined when the plan cannot serve the call; the caller then runs ATen.
at::Tensor lt_fresh(const AtenSite& s, trd_frame& f, const at::Tensor& a, const at::Tensor& b, c10::IntArrayRef sizes) {
  const c10::ScalarType dt = a.scalar_type();
  if (!(f.below_autograd && s.gemm && s.gemm->state() != LtGemm::State::Declined && a.is_cuda() &&
        (dt == c10::ScalarType::BFloat16 || dt == c10::ScalarType::Half)))
    return {};
  at::Tensor out = at::detail::empty_generic(sizes, c10::GetAllocator(c10::DeviceType::CUDA),
                                             c10::DispatchKeySet(c10::DispatchKey::CUDA), dt, std::nullopt);
  return s.gemm->run(a, b, out) ? out : at::Tensor();
}
at::Tensor mm_fresh(const AtenSite& s, trd_frame& f, const at::Tensor& a, const at::Tensor& b) {
  const int64_t sizes[2] = {a.size(0), b.size(1)};
  at::Tensor out = lt_fresh(s, f, a, b, sizes);
  return out.defined() ? out : at::_ops::mm::call(a, b);
}

// F.linear of a 2-D input is what ATen's own linear computes after two composite layers:
// addmm(bias, x, w.t()) with a bias, matmul(x, w.t()) = mm(x, w.t()) without. Calling mm/addmm
// directly skips linear, matmul, t and transpose dispatches; the transposed weight view is kept
// per site for captured state (a parameter) and rebuilt whenever the weight's data pointer, dtype,
// sizes or strides change; a weight passed as an argument is not kept (its memory is the caller's).
at::Tensor transposed_weight(const AtenSite& s, const at::Tensor& w) {
  if (s.args[1].ref.kind != ir::Operand::Kind::StateRef) return at::_ops::t::call(w);
  at::Tensor& wt = s.view_cache;
  if (!wt.defined() || wt.data_ptr() != w.data_ptr() || wt.scalar_type() != w.scalar_type() ||
      wt.device() != w.device() || wt.size(0) != w.size(1) || wt.size(1) != w.size(0) ||
      wt.stride(0) != w.stride(1) || wt.stride(1) != w.stride(0))
    wt = at::_ops::t::call(w);
  return wt;
}
// A contiguous input of more than two dimensions: ATen's linear multiplies it flattened to 2-D
// (matmul's fold: mm, then _unsafe_view to the result's shape; with a bias, 3-D input only:
// _flatten_nd_linear's addmm, then view), so the same product runs here on the same flattened view
// and the result takes the same shape, strides and view-ness.
bool folds_to_2d(const at::Tensor& x, const at::Tensor& w, bool has_bias) {
  return x.dim() >= 3 && w.dim() == 2 && x.layout() == c10::kStrided && w.layout() == c10::kStrided &&
         x.is_contiguous() && (!has_bias || x.dim() == 3) && x.size(-1) == w.size(1);
}

std::atomic<bool>& linear_nd_switch() {
  static std::atomic<bool> on{env_switch_set("TRIDENT_LINEAR_ND")};
  return on;
}

// F.linear of a contiguous N-D input without a bias, in a run that records no autograd history:
// cuBLASLt multiplies x's memory as [M, K] into a result allocated [..., N] directly, skipping the
// view and _unsafe_view dispatches that ATen's fold costs (two per GEMM). The result is what that
// _unsafe_view returns: contiguous, not a view. Where cuBLASLt does not serve the call, ATen's own
// fold runs (view, mm, _unsafe_view): the same tensor.
void linear_nd(const AtenSite& s, trd_frame& f, const at::Tensor& x, const at::Tensor& w) {
  const at::Tensor wt = transposed_weight(s, w);
  c10::SmallVector<int64_t, 6> sizes(x.sizes().begin(), x.sizes().end());
  sizes.back() = w.size(0);
  const int64_t k = x.size(-1), rows = x.numel() / k;  // k > 0: folds_to_2d's caller ran only then
  const int64_t flat_x[2] = {rows, k}, flat_out[2] = {rows, w.size(0)};
  ReusePool::Key key(sizes.begin(), sizes.end());
  key.push_back(static_cast<int64_t>(sizes.size()));  // keys of other ranks never match this one
  push_device(key, x);
  produce(
      s, f, key,
      [&] {
        if (at::Tensor out = lt_fresh(s, f, x, wt, sizes); out.defined()) return out;
        const at::Tensor flat = at::_ops::view::call(x, c10::fromIntArrayRefSlow(flat_x));
        return at::_ops::_unsafe_view::call(at::_ops::mm::call(flat, wt), c10::fromIntArrayRefSlow(sizes));
      },
      [&](at::Tensor& out) {
        if (s.gemm && s.gemm->run(x, wt, out)) return;
        at::Tensor out_2d = at::_ops::view::call(out, c10::fromIntArrayRefSlow(flat_out));
        at::_ops::mm_out::call(at::_ops::view::call(x, c10::fromIntArrayRefSlow(flat_x)), wt, out_2d);
      });
}
}  // namespace

bool set_linear_nd_for_new_modules(bool on) { return linear_nd_switch().exchange(on); }
bool linear_nd_for_new_modules() { return linear_nd_switch().load(); }

void mm(const AtenSite& s, trd_frame& f, const int64_t*) {
  const at::Tensor& a = s.tensor(f, 0);
  const at::Tensor& b = s.tensor(f, 1);
  if (!mm_shapes(a, b)) return s.set_result(f, 0, at::_ops::mm::call(a, b));  // ATen reports the error
  produce(s, f, matmul_key(a, b.size(1)), [&] { return mm_fresh(s, f, a, b); },
          [&](at::Tensor& out) { mm_into(s, f, a, b, out); });
}
void bmm(const AtenSite& s, trd_frame& f, const int64_t*) {
  s.set_result(f, 0, at::_ops::bmm::call(s.tensor(f, 0), s.tensor(f, 1)));
}
void addmm(const AtenSite& s, trd_frame& f, const int64_t*) {
  s.set_result(f, 0, at::_ops::addmm::call(s.tensor(f, 0), s.tensor(f, 1), s.tensor(f, 2),
                                           s.args[3].constant.toScalar(), s.args[4].constant.toScalar()));
}
void linear(const AtenSite& s, trd_frame& f, const int64_t*) {
  const at::Tensor& w = s.tensor(f, 1);
  const bool has_bias = s.args[2].kind == P::Tensor;
  const at::Tensor* x = &s.tensor(f, 0);
  const bool fold = !mm_shapes(*x, w) && folds_to_2d(*x, w, has_bias);
  if (!fold && !mm_shapes(*x, w)) {
    std::optional<at::Tensor> bias;
    if (has_bias) bias = s.tensor(f, 2);
    return s.set_result(f, 0, at::_ops::linear::call(*x, w, bias));
  }
  if (fold && !has_bias && s.linear_nd && f.below_autograd && x->size(-1) > 0) return linear_nd(s, f, *x, w);
  c10::SmallVector<int64_t, 6> out_sizes;
  at::Tensor flat;
  if (fold) {
    out_sizes.assign(x->sizes().begin(), x->sizes().end() - 1);
    int64_t rows = 1;  // not numel / k: k may be 0
    for (int64_t d : out_sizes) rows *= d;
    out_sizes.push_back(w.size(0));
    const int64_t flat_sizes[2] = {rows, x->size(-1)};
    flat = at::_ops::view::call(*x, c10::fromIntArrayRefSlow(flat_sizes));
    x = &flat;
  }
  const at::Tensor wt = transposed_weight(s, w);
  if (has_bias) {
    const at::Tensor& bias = s.tensor(f, 2);
    produce(s, f, matmul_key(*x, w.size(0)), [&] { return at::_ops::addmm::call(bias, *x, wt, 1, 1); },
            [&](at::Tensor& out) { at::_ops::addmm_out::call(bias, *x, wt, 1, 1, out); });
  } else {
    produce(s, f, matmul_key(*x, w.size(0)), [&] { return mm_fresh(s, f, *x, wt); },
            [&](at::Tensor& out) { mm_into(s, f, *x, wt, out); });
  }
  if (!fold) return;
  at::Tensor& result = f.slots[s.result_slots[0]];
  const auto sizes = c10::fromIntArrayRefSlow(out_sizes);
  result = has_bias ? at::_ops::view::call(result, sizes) : at::_ops::_unsafe_view::call(result, sizes);
}

}  // namespace trident::runtime::typed
