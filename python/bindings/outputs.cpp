#include "outputs.h"

#include <c10/util/SmallVector.h>
#include <torch/csrc/autograd/python_variable.h>

#include <utility>

namespace trident::bindings {
namespace {

PyObject* wrap(const at::Tensor& t) {
  if (!t.defined()) Py_RETURN_NONE;
  return THPVariable_Wrap(t);  // new ref; the same Python object if this tensor already has one
}

// The Python objects made so far from moved-out slots, for a value the tree names again.
using Wrapped = c10::SmallVector<std::pair<int64_t, PyObject*>, 4>;

PyObject* wrap_slot(at::Tensor* slots, int64_t i, Wrapped& wrapped) {
  for (const auto& [slot, obj] : wrapped)
    if (slot == i) {
      Py_INCREF(obj);
      return obj;
    }
  if (!slots[i].defined()) Py_RETURN_NONE;
  // new ref; the tensor's own Python object if it has one (an argument returned through an op)
  PyObject* obj = THPVariable_Wrap(std::move(slots[i]));
  if (obj) wrapped.emplace_back(i, obj);  // borrowed: the tree being built holds it
  return obj;
}

PyObject* build(const ir::Operand& o, at::Tensor* slots, PyObject* const* arg_objects, const at::Tensor* state,
                const int64_t* out_ints, Wrapped& wrapped) {
  using K = ir::Operand::Kind;
  switch (o.kind) {
    case K::Value: return wrap_slot(slots, o.i, wrapped);
    case K::StateRef: return wrap(state[o.i]);
    case K::ArgRef: Py_INCREF(arg_objects[o.i]); return arg_objects[o.i];
    case K::Sym: return PyLong_FromLongLong(out_ints[o.i]);
    case K::None: Py_RETURN_NONE;
    case K::Bool: return PyBool_FromLong(static_cast<long>(o.i));
    case K::Int: return PyLong_FromLongLong(o.i);
    case K::Float: return PyFloat_FromDouble(o.f);
    case K::Str: return PyUnicode_FromStringAndSize(o.s.data(), static_cast<Py_ssize_t>(o.s.size()));
    case K::Tuple:
    case K::List: {
      Py_ssize_t n = static_cast<Py_ssize_t>(o.items.size());
      PyObject* c = o.kind == K::Tuple ? PyTuple_New(n) : PyList_New(n);  // new ref
      if (!c) return nullptr;
      for (Py_ssize_t k = 0; k < n; ++k) {
        PyObject* item = build(o.items[k], slots, arg_objects, state, out_ints, wrapped);
        if (!item) { Py_DECREF(c); return nullptr; }
        if (o.kind == K::Tuple) PyTuple_SET_ITEM(c, k, item);  // steals item
        else PyList_SET_ITEM(c, k, item);
      }
      return c;
    }
    case K::Dict: {
      PyObject* d = PyDict_New();  // new ref
      if (!d) return nullptr;
      for (size_t k = 0; k < o.items.size(); ++k) {
        PyObject* item = build(o.items[k], slots, arg_objects, state, out_ints, wrapped);
        // The key's exact bytes (it may hold NUL or non-ASCII characters the IR escaped).
        PyObject* key = item ? PyUnicode_DecodeUTF8(o.keys[k].data(), static_cast<Py_ssize_t>(o.keys[k].size()),
                                                    "surrogatepass")
                             : nullptr;  // new ref
        if (!key || PyDict_SetItem(d, key, item) < 0) {
          Py_XDECREF(key);
          Py_XDECREF(item);
          Py_DECREF(d);
          return nullptr;
        }
        Py_DECREF(key);
        Py_DECREF(item);
      }
      return d;
    }
    default:
      PyErr_SetString(PyExc_RuntimeError, "trident internal error: unexpected operand in an output tree");
      return nullptr;
  }
}

}  // namespace

PyObject* build_output(const ir::Operand& tree, at::Tensor* slots, PyObject* const* arg_objects,
                       const at::Tensor* state, const int64_t* out_ints) {
  Wrapped wrapped;
  return build(tree, slots, arg_objects, state, out_ints, wrapped);
}

}  // namespace trident::bindings
