#include "outputs.h"

#include <torch/csrc/autograd/python_variable.h>

namespace trident::bindings {
namespace {

PyObject* wrap(const at::Tensor& t) {
  if (!t.defined()) Py_RETURN_NONE;
  return THPVariable_Wrap(t);  // new ref; the same Python object if this tensor already has one
}

}  // namespace

PyObject* build_output(const ir::Operand& o, const at::Tensor* slots, PyObject* const* arg_objects,
                       const at::Tensor* state, const int64_t* out_ints) {
  using K = ir::Operand::Kind;
  switch (o.kind) {
    case K::Value: return wrap(slots[o.i]);
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
        PyObject* item = build_output(o.items[k], slots, arg_objects, state, out_ints);
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
        PyObject* item = build_output(o.items[k], slots, arg_objects, state, out_ints);
        if (!item || PyDict_SetItemString(d, o.keys[k].c_str(), item) < 0) {
          Py_XDECREF(item);
          Py_DECREF(d);
          return nullptr;
        }
        Py_DECREF(item);
      }
      return d;
    }
    default:
      PyErr_SetString(PyExc_RuntimeError, "trident internal error: unexpected operand in an output tree");
      return nullptr;
  }
}

}  // namespace trident::bindings
