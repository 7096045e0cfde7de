#include "runtime/aten/aten_site.h"
#include "common/errors.h"

#include <ATen/core/stack.h>
#include <ATen/ScalarOps.h>
#include <c10/core/Device.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "ir/text.h"

namespace trident::runtime {
namespace {

using K = ir::Operand::Kind;

[[noreturn]] void bad(const std::string& op, size_t k, const std::string& what) {
  ::trident::internal_error("call site " + op + ", operand " + std::to_string(k) + ": " + what, __FILE__, __LINE__);
}

bool is_location(const ir::Operand& o) {
  return o.kind == K::Value || o.kind == K::ArgRef || o.kind == K::StateRef;
}

bool has_dynamic(const ir::Operand& o) {
  if (is_location(o) || o.kind == K::Sym) return true;
  for (const auto& it : o.items)
    if (has_dynamic(it)) return true;
  return false;
}

// A literal operand as an IValue of the schema type `t` (unwrapped from Optional by the caller).
c10::IValue literal(const ir::Operand& o, const c10::TypePtr& t, const std::string& op, size_t k) {
  switch (o.kind) {
    case K::None: return c10::IValue();
    case K::Bool: return c10::IValue(o.i != 0);
    case K::Int:
      if (t->kind() == c10::TypeKind::FloatType) return c10::IValue(static_cast<double>(o.i));
      return c10::IValue(o.i);
    case K::Float: return c10::IValue(o.f);
    case K::Str: return c10::IValue(o.s);
    case K::Dtype:
    case K::Layout:
    case K::MemFmt: return c10::IValue(o.i);
    case K::Device:
      return c10::IValue(c10::Device(static_cast<c10::DeviceType>(o.i), static_cast<c10::DeviceIndex>(o.j)));
    case K::List:
    case K::Tuple: {
      c10::TypePtr elem = t->kind() == c10::TypeKind::ListType ? t->expectRef<c10::ListType>().getElementType()
                                                               : c10::IntType::get();
      auto ek = elem->kind();
      if (ek == c10::TypeKind::IntType || ek == c10::TypeKind::SymIntType) {
        c10::List<int64_t> l;
        for (const auto& it : o.items) l.push_back(it.i);
        return c10::IValue(l);
      }
      if (ek == c10::TypeKind::FloatType) {
        c10::List<double> l;
        for (const auto& it : o.items) l.push_back(it.kind == K::Float ? it.f : static_cast<double>(it.i));
        return c10::IValue(l);
      }
      if (ek == c10::TypeKind::BoolType) {
        c10::List<bool> l;
        for (const auto& it : o.items) l.push_back(it.i != 0);
        return c10::IValue(l);
      }
      bad(op, k, "constant list of unsupported element type " + elem->str());
    }
    default: bad(op, k, "unexpected operand " + ir::print_operand(o));
  }
}

c10::TypePtr unwrap_optional(const c10::TypePtr& t) {
  if (t->kind() == c10::TypeKind::OptionalType) return t->expectRef<c10::OptionalType>().getElementType();
  return t;
}

ArgPlan plan(const ir::Operand& o, const c10::Argument& arg, const std::string& op, size_t k) {
  ArgPlan p;
  c10::TypePtr t = unwrap_optional(arg.type());
  if (t->kind() == c10::TypeKind::TensorType &&
      (o.kind == K::Int || o.kind == K::Float || o.kind == K::Bool)) {
    // A Python number where the schema wants a Tensor (aten.mul.Tensor(x, 2.0)): a 0-dim "wrapped
    // number" tensor, as the Python argument parser makes, so type promotion treats it as a scalar.
    c10::Scalar v = o.kind == K::Float ? c10::Scalar(o.f) : o.kind == K::Bool ? c10::Scalar(o.i != 0) : c10::Scalar(o.i);
    at::Tensor w = c10::scalar_to_tensor(v);
    w.unsafeGetTensorImpl()->set_wrapped_number(true);
    p.kind = ArgPlan::Kind::Const;
    p.constant = c10::IValue(std::move(w));
    return p;
  }
  if (o.kind == K::None || !has_dynamic(o)) {
    p.kind = ArgPlan::Kind::Const;
    p.constant = literal(o, t, op, k);
    return p;
  }
  if (is_location(o)) {
    if (t->kind() != c10::TypeKind::TensorType) bad(op, k, "tensor given where the schema expects " + t->str());
    p.kind = ArgPlan::Kind::Tensor;
    p.ref = o;
    return p;
  }
  if (o.is_fsym()) {
    auto tk = t->kind();
    if (tk == c10::TypeKind::TensorType) p.kind = ArgPlan::Kind::FloatTensor;
    else if (tk == c10::TypeKind::FloatType || tk == c10::TypeKind::NumberType || tk == c10::TypeKind::SymFloatType)
      p.kind = ArgPlan::Kind::Float;
    else bad(op, k, "float given where the schema expects " + t->str());
    p.ref = o;
    return p;
  }
  if (o.kind == K::Sym) {
    p.kind = t->kind() == c10::TypeKind::TensorType  ? ArgPlan::Kind::SymTensor
             : t->kind() == c10::TypeKind::FloatType ? ArgPlan::Kind::SymFloat
                                                     : ArgPlan::Kind::Sym;
    p.ref = o;
    return p;
  }
  if (o.kind == K::List || o.kind == K::Tuple) {
    if (t->kind() != c10::TypeKind::ListType) bad(op, k, "list given where the schema expects " + t->str());
    auto elem = t->expectRef<c10::ListType>().getElementType();
    p.items = o.items;
    for (const auto& it : o.items)
      if (it.is_fsym()) bad(op, k, "a list holding a run-time float is not supported");
    switch (elem->kind()) {
      case c10::TypeKind::IntType:
      case c10::TypeKind::SymIntType: p.kind = ArgPlan::Kind::IntList; return p;
      case c10::TypeKind::TensorType: p.kind = ArgPlan::Kind::TensorList; return p;
      case c10::TypeKind::OptionalType: p.kind = ArgPlan::Kind::OptTensorList; return p;
      default: bad(op, k, "dynamic list of " + elem->str() + " is not supported");
    }
  }
  bad(op, k, "unsupported operand " + ir::print_operand(o));
}

}  // namespace

const at::Tensor& tensor_at(const trd_frame& f, const ir::Operand& loc) {
  if (loc.kind == K::Value) return f.slots[loc.i];
  if (loc.kind == K::ArgRef) return *f.args[loc.i];
  return f.state[loc.i];
}

std::string reuse_signature(const AtenSite& site) {
  // Printed by hand: iostreams in this library crashed on the GPU machine's libstdc++ (a locale
  // facet of another copy of the library), and IValue's printer is no contract.
  std::string s = site.name;
  for (const ArgPlan& p : site.args) {
    s += '|' + std::to_string(static_cast<int>(p.kind));
    if (p.kind != ArgPlan::Kind::Const) continue;
    const c10::IValue& v = p.constant;
    if (v.isNone()) {
      s += ":none";
    } else if (v.isBool()) {
      s += v.toBool() ? ":true" : ":false";
    } else if (v.isInt()) {
      s += ":i" + std::to_string(v.toInt());
    } else if (v.isDouble()) {
      const double d = v.toDouble();
      int64_t bits = 0;
      std::memcpy(&bits, &d, sizeof bits);
      s += ":d" + std::to_string(bits);
    } else if (v.isString()) {
      s += ":s" + v.toStringRef();
    } else if (v.isDevice()) {
      s += ":dev" + std::to_string(static_cast<int>(v.toDevice().type())) + "." + std::to_string(v.toDevice().index());
    } else if (v.isIntList()) {
      s += ":l";
      for (int64_t x : v.toIntList()) s += "," + std::to_string(x);
    } else if (v.isTensor() && v.toTensor().unsafeGetTensorImpl()->is_wrapped_number()) {
      s += ":w" + std::to_string(static_cast<int>(v.toTensor().scalar_type()));  // metadata, not value
    } else {  // anything else: a kind of its own, shared with no site
      s += ":site" + std::to_string(reinterpret_cast<uintptr_t>(&site));
    }
  }
  return s;
}

const at::Tensor& AtenSite::tensor(const trd_frame& f, size_t k) const { return tensor_at(f, args[k].ref); }

int64_t AtenSite::integer(size_t k, const int64_t* dyn) const {
  const ArgPlan& p = args[k];
  return p.kind == ArgPlan::Kind::Sym ? dyn[p.ref.i] : p.constant.toInt();
}

int32_t dyn_count(const std::vector<ir::Operand>& operands) {
  int32_t n = 0;
  for (const ir::Operand& o : operands) {
    if (o.kind == K::Sym) n = std::max(n, static_cast<int32_t>(o.i) + 1);
    n = std::max(n, dyn_count(o.items));
  }
  return n;
}

AtenSite resolve_site(const ir::Instr& call) {
  const std::string& full = call.op;
  size_t ns = full.find("::");
  size_t dot = full.find('.', ns == std::string::npos ? 0 : ns + 2);
  std::string name = dot == std::string::npos ? full : full.substr(0, dot);
  std::string overload = dot == std::string::npos ? "" : full.substr(dot + 1);
  if (overload == "default") overload = "";
  auto handle = c10::Dispatcher::singleton().findSchema({name, overload});
  if (!handle)
    throw std::invalid_argument("operator " + full + " is not registered with the dispatcher: import or load "
                                "(torch.ops.load_library) what defines it before calling the compiled function");
  AtenSite site(full, *handle);
  const auto& schema = handle->schema();
  const auto& formals = schema.arguments();
  if (call.operands.size() != formals.size())
    ::trident::internal_error("call site " + full + ": schema " + c10::toString(schema) + " takes " +
                                  std::to_string(formals.size()) + " arguments, the site gives " +
                                  std::to_string(call.operands.size()),
                              __FILE__, __LINE__);
  for (size_t k = 0; k < formals.size(); ++k) site.args.push_back(plan(call.operands[k], formals[k], full, k));
  for (int64_t r : call.results) site.result_slots.push_back(static_cast<int32_t>(r));
  site.ndyn = dyn_count(call.operands);
  site.typed = find_typed(site);
  return site;
}

void AtenSite::invoke(trd_frame& f, const int64_t* dyn) const {
  if (hook && hook->before(*this, f, dyn)) return;
  if (typed) {
    typed(*this, f, dyn);
  } else {
    torch::jit::Stack stack = boxed_arguments(f, dyn);
    op.callBoxed(stack);
    store_returns(f, stack);
  }
  if (hook) hook->after(*this, f, dyn);
}

torch::jit::Stack AtenSite::boxed_arguments(const trd_frame& f, const int64_t* dyn) const {
  torch::jit::Stack stack;
  stack.reserve(args.size());
  for (const auto& p : args) {
    switch (p.kind) {
      case ArgPlan::Kind::Const: stack.push_back(p.constant); break;
      case ArgPlan::Kind::Tensor: stack.emplace_back(tensor_at(f, p.ref)); break;
      case ArgPlan::Kind::Sym: stack.emplace_back(dyn[p.ref.i]); break;
      case ArgPlan::Kind::SymFloat: stack.emplace_back(static_cast<double>(dyn[p.ref.i])); break;
      case ArgPlan::Kind::SymTensor: {
        at::Tensor w = c10::scalar_to_tensor(c10::Scalar(dyn[p.ref.i]));
        w.unsafeGetTensorImpl()->set_wrapped_number(true);
        stack.emplace_back(std::move(w));
        break;
      }
      case ArgPlan::Kind::Float: stack.emplace_back(dyn_float(dyn, p.ref.i)); break;
      case ArgPlan::Kind::FloatTensor: {
        at::Tensor w = c10::scalar_to_tensor(c10::Scalar(dyn_float(dyn, p.ref.i)));
        w.unsafeGetTensorImpl()->set_wrapped_number(true);
        stack.emplace_back(std::move(w));
        break;
      }
      case ArgPlan::Kind::IntList: {
        c10::List<int64_t> l;
        l.reserve(p.items.size());
        for (const auto& it : p.items) l.push_back(it.kind == K::Sym ? dyn[it.i] : it.i);
        stack.emplace_back(std::move(l));
        break;
      }
      case ArgPlan::Kind::TensorList: {
        c10::List<at::Tensor> l;
        l.reserve(p.items.size());
        for (const auto& it : p.items) l.push_back(tensor_at(f, it));
        stack.emplace_back(std::move(l));
        break;
      }
      case ArgPlan::Kind::OptTensorList: {
        c10::List<std::optional<at::Tensor>> l;
        l.reserve(p.items.size());
        for (const auto& it : p.items)
          l.push_back(it.kind == K::None ? std::optional<at::Tensor>() : std::optional<at::Tensor>(tensor_at(f, it)));
        stack.emplace_back(std::move(l));
        break;
      }
    }
  }
  return stack;
}

void AtenSite::store_returns(trd_frame& f, torch::jit::Stack& stack) const {
  size_t r = 0;
  for (auto& v : stack) {
    if (v.isTensor()) {
      if (r < result_slots.size()) f.slots[result_slots[r]] = std::move(v).toTensor();
      ++r;
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorVector()) {
        if (r < result_slots.size()) f.slots[result_slots[r]] = t;
        ++r;
      }
    } else if (v.isNone() || v.isInt() || v.isSymInt() || v.isDouble() || v.isBool()) {
      ++r;  // an absent tensor, or a number the lowering proved nothing reads (its slot stays empty)
    } else {
      throw std::runtime_error("returned a " + v.tagKind() + ", which the host program cannot hold");
    }
  }
  if (r != result_slots.size())
    throw std::runtime_error("returned " + std::to_string(r) + " tensors, the program expected " +
                             std::to_string(result_slots.size()));
}

}  // namespace trident::runtime
