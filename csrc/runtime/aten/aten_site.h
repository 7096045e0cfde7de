// One ATen call site of a module, resolved once at load time: the operator handle is looked up in
// the dispatcher, each operand is checked against the schema and turned into a plan (a constant
// IValue built once, a tensor location, or a runtime integer), so a call only fills in what varies.
// Any operator the dispatcher knows runs through the boxed path; typed entry points for the hot ops
// are chosen at resolve time too (see aten_typed.cpp).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "runtime/memory/buffer_reuse.h"
#include "runtime/module/frame.h"

namespace trident::runtime {

// An operand, planned against its schema type.
struct ArgPlan {
  enum class Kind : uint8_t {
    Const, Tensor, Sym, IntList, TensorList, OptTensorList,
    SymTensor,  // a runtime integer where the schema wants a Tensor: a 0-dim wrapped number
    SymFloat,   // a runtime integer where the schema wants a float
    Float,        // a runtime float ($fj: dyn holds its bits) where the schema wants a float or Scalar
    FloatTensor,  // a runtime float where the schema wants a Tensor: a 0-dim wrapped number
  };
  Kind kind = Kind::Const;
  c10::IValue constant;          // Const
  ir::Operand ref;               // Tensor: location (arg/state/slot); Sym: dyn index
  std::vector<ir::Operand> items;  // lists: each item an int literal, $dyn, location or none
};

using TypedFn = void (*)(const struct AtenSite& site, trd_frame& f, const int64_t* dyn);
class LtGemm;  // gemm/lt_gemm.h

// What another family attaches to a site to take part in its calls (the loader attaches
// replay/op_replay.h's): before() may serve the call instead of ATen (true: its returns are in the
// frame); after() sees every call ATen ran, its returns in the frame. The site knows no more of it.
class SiteHook {
 public:
  virtual ~SiteHook() = default;
  virtual bool before(const struct AtenSite& s, trd_frame& f, const int64_t* dyn) = 0;
  virtual void after(const struct AtenSite& s, trd_frame& f, const int64_t* dyn) = 0;
};

struct AtenSite {
  std::string name;                 // "aten::mm", with overload when not default
  c10::OperatorHandle op;
  std::vector<ArgPlan> args;
  std::vector<int32_t> result_slots;
  int32_t ndyn = 0;                 // the dyn values the site reads (dyn_count)
  TypedFn typed = nullptr;          // set when a typed entry point serves this op and these operands
  mutable ReusePool::Site reuse;    // allocation sites only: their state in the module's pool (buffer_reuse.h)
  mutable at::Tensor view_cache;    // linear sites: the transposed weight view (aten_typed_gemm.cpp)
  bool linear_nd = false;           // linear sites: N-D inputs multiplied without views (aten_typed_gemm.cpp)
  std::shared_ptr<void> typed_handle;  // generic typed sites: their c10::TypedOperatorHandle
  std::shared_ptr<LtGemm> gemm;        // mm and linear sites: their cuBLASLt plan (lt_gemm.h)
  std::shared_ptr<SiteHook> hook;      // set by the loader: a call's launches recorded and replayed (op_replay.h)

  AtenSite(std::string n, c10::OperatorHandle h) : name(std::move(n)), op(std::move(h)) {}
  void invoke(trd_frame& f, const int64_t* dyn) const;
  // The boxed path in two halves: the argument stack of this call, and its returns stored in the
  // frame's result slots (throws when they do not fit the slots).
  torch::jit::Stack boxed_arguments(const trd_frame& f, const int64_t* dyn) const;
  void store_returns(trd_frame& f, torch::jit::Stack& returns) const;
  bool may_reuse() const;  // an allocation site served by a typed entry point that reuses buffers

  // Helpers for typed entry points.
  const at::Tensor& tensor(const trd_frame& f, size_t k) const;
  int64_t integer(size_t k, const int64_t* dyn) const;
  void set_result(trd_frame& f, size_t k, at::Tensor t) const { f.slots[result_slots[k]] = std::move(t); }
};

// The run-time float a site's $fj operand names: dyn carries its bit pattern.
inline double dyn_float(const int64_t* dyn, int64_t j) {
  double v;
  std::memcpy(&v, dyn + j, sizeof v);
  return v;
}

// The number of dyn values a site in site form reads: 1 + the highest $N among its operands (0 if none).
int32_t dyn_count(const std::vector<ir::Operand>& operands);

// Resolve a call instruction in site form (operands resolved to locations, $N = dyn index).
// Throws std::invalid_argument naming the operator and the operand on any mismatch.
AtenSite resolve_site(const ir::Instr& call);

const at::Tensor& tensor_at(const trd_frame& f, const ir::Operand& loc);

// The operator and its constant operands, printed: sites with equal signatures make results of the
// same metadata from the same reuse key, so they may share kept buffers (buffer_reuse.h).
std::string reuse_signature(const AtenSite& site);

// Typed entry points (aten_typed.cpp): returns nullptr when none applies.
TypedFn find_typed(AtenSite& site);

}  // namespace trident::runtime
