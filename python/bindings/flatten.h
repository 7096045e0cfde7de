// Flattening a call's Python arguments into guard leaves, natively.
//
// Structure string (what guards compare first, byte for byte):
//   leaf codes   T tensor, i int, b bool, f float, n None
//   containers   (...) tuple, z(...) torch.Size, [...] list, {k=...,#3=...} dict with identifier string keys or int
//                keys (#<decimal>), in insertion order, as pytree flattens it, nested freely;
//                <N{name=...,name=...}> an instance of registered class N (arg_objects.h), its
//                instance dictionary in insertion order; <N(...)> an instance of registered
//                tuple class N (a namedtuple or structseq), its items as a tuple's
//   constants    as attribute values of such objects, or as arguments themselves, guarded by
//                value: s<len>:<utf-8 bytes> a str, y<c10 ScalarType> a dtype, d<type>.<index> a
//                device, c<N> a class and e<N> an enum member by identity (number N in
//                arg_objects.h's table); inside a tuple, list or dict only a str (flatten.cpp: Place)
//   modules      M<N> a torch.nn.Module passed as an argument itself (not inside a container),
//                by identity (number N in arg_objects.h's table of weak references); no leaf
//   keywords     after the positional part, each as ";name=" then its value's code
//   settings     "@dtype.det" last, when a global setting differs from its default, and
//                "@dtype.det.cpu.cuda" under torch.autocast (1 + the dtype it casts to per device,
//                0 where it is off) (flatten.cpp: append_global_state)
// e.g. f(x, (y, z), 3, {"k": k}, scale=0.5) -> "T(TT)i{k=T};scale=f". The same string is computed for
// the Python capture path through describe_args(), so the compiled guards and the hot path cannot
// disagree.
//
// Anything else (dict subclasses or other keys, tensor subclasses, a dtype inside a list, ...) makes
// flatten fail with the path of the offending argument; the call then takes the Python miss path,
// which decides what to do.
#pragma once

#include <Python.h>

#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>

#include <string>

#include "abi/trident_abi.h"

namespace trident::bindings {

struct FlatArgs {
  c10::SmallVector<trd_leaf, 8> leaves;
  c10::SmallVector<const at::Tensor*, 8> tensors;  // per leaf, nullptr for non-tensors (borrowed)
  c10::SmallVector<PyObject*, 8> objects;          // per leaf (borrowed from the call's arguments)
  // Containers and objects in visit order (pre-order: a container before what it holds), borrowed:
  // what an output tree's node(K) and update(K) name.
  c10::SmallVector<PyObject*, 8> nodes;
  std::string structure;
  bool autocast = false;    // the call runs under torch.autocast (the settings suffix says how)
  std::string unsupported;  // set when flattening failed: "argument 2.layers[0]: dict is not supported"
  std::string where;        // while failing: the path below the argument (".layers[0]")
};

// Returns false (with out.unsupported set) if an argument cannot be described natively.
bool flatten_args(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames, FlatArgs& out);

// The call the guards read: the flattened leaves (borrowed from `flat`) and the current grad mode.
trd_call make_call(const FlatArgs& flat);

// Fill one tensor leaf from its TensorImpl. False when the tensor cannot be served natively
// (rank above TRD_MAX_DIM, sparse or other non-strided layout).
bool fill_tensor_leaf(const at::Tensor& t, trd_leaf& leaf);

}  // namespace trident::bindings
