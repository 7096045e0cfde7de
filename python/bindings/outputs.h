// Building the Python result of a call from a spec's output tree (host IR return syntax).
#pragma once

#include <Python.h>

#include <ATen/core/Tensor.h>

#include "ir/ir.h"

namespace trident::bindings {

// New reference, or nullptr with a Python error set. `arg_objects` are the call's leaf objects:
// an output that is an argument returns that very object, as eager would. `nodes` are the call's
// containers and objects (flatten.h), which node(K) returns and update(K) changes in place: how
// a run leaves the objects it was given as eager leaves them (a cache's new tensors).
//
// The frame's values are moved out of `slots` into their Python objects (the frame is over when
// this runs): a fresh tensor then gets its Python object without the extra C++ reference whose
// release would call back into the interpreter. A value the tree names twice is the same object
// both times. Slots the tree does not name are left as they are.
PyObject* build_output(const ir::Operand& tree, at::Tensor* slots, PyObject* const* arg_objects, size_t nargs,
                       PyObject* const* nodes, size_t nnodes, const at::Tensor* state, const int64_t* out_ints);

}  // namespace trident::bindings
