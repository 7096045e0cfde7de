#include "outputs.h"

#include <cstring>

#include <c10/util/SmallVector.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/autograd/utils/wrap_outputs.h>

#include <utility>

#include "arg_objects.h"

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

// What an output tree reads besides its own literals.
struct Sources {
  at::Tensor* slots;
  PyObject* const* arg_objects;
  PyObject* const* nodes;
  size_t nnodes;
  const at::Tensor* state;
  const int64_t* out_ints;
  Wrapped wrapped;
};

PyObject* build(const ir::Operand& o, Sources& src);

// Set key: value for each of o's (keys, items) in `dict` (an instance dictionary, a dict, keyword
// arguments): a str key, or an int where o marks it so.
bool set_attributes(const ir::Operand& o, PyObject* dict, Sources& src) {
  for (size_t k = 0; k < o.items.size(); ++k) {
    PyObject* item = build(o.items[k], src);
    PyObject* key = !item ? nullptr
                    : o.int_key(k) ? PyLong_FromString(o.keys[k].c_str(), nullptr, 10)
                                   : PyUnicode_DecodeUTF8(o.keys[k].data(), static_cast<Py_ssize_t>(o.keys[k].size()),
                                                          "surrogatepass");  // new ref
    bool ok = key && PyDict_SetItem(dict, key, item) == 0;
    Py_XDECREF(key);
    Py_XDECREF(item);
    if (!ok) return false;
  }
  return true;
}

PyObject* node_at(int64_t i, Sources& src) {
  if (i < 0 || static_cast<size_t>(i) >= src.nnodes) {
    PyErr_SetString(PyExc_RuntimeError, "trident internal error: output tree names a node the call does not have");
    return nullptr;
  }
  return src.nodes[i];  // borrowed
}

// A new instance of class pyref(o.i) with o's attributes, made as object.__new__ makes it (the
// classes arg_objects.py admits derive from object alone), as eager's code would have left it;
// with j == 1, the class called with them as keyword arguments.
PyObject* new_object(const ir::Operand& o, Sources& src) {
  PyObject* cls = interned_object(o.i);
  if (!cls || !PyType_Check(cls)) {
    PyErr_SetString(PyExc_RuntimeError, "trident internal error: output tree names an unknown class");
    return nullptr;
  }
  if (o.j == 2) {  // a tuple class: a structseq is called with its items; a namedtuple made as
                   // its _make makes it (tuple.__new__), without running its Python __new__
    ir::Operand as_tuple = o;
    as_tuple.kind = ir::Operand::Kind::Tuple;
    PyObject* items = build(as_tuple, src);
    if (!items) return nullptr;
    PyObject* obj = nullptr;
    if (PyObject_HasAttrString(cls, "n_sequence_fields")) {
      obj = PyObject_CallOneArg(cls, items);
    } else if (PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(cls), &PyTuple_Type)) {
      PyObject* args = PyTuple_Pack(1, items);
      obj = args ? PyTuple_Type.tp_new(reinterpret_cast<PyTypeObject*>(cls), args, nullptr) : nullptr;
      Py_XDECREF(args);
    } else {
      PyErr_SetString(PyExc_RuntimeError, "trident internal error: output tree seq of a class that is not a tuple");
    }
    Py_DECREF(items);
    return obj;
  }
  PyObject* empty = PyTuple_New(0);
  if (o.j == 1) {  // cls(**fields): a dict-like result class of a library (a ModelOutput)
    PyObject* kwargs = empty ? PyDict_New() : nullptr;
    PyObject* obj = kwargs && set_attributes(o, kwargs, src) ? PyObject_Call(cls, empty, kwargs) : nullptr;
    Py_XDECREF(kwargs);
    Py_XDECREF(empty);
    return obj;
  }
  PyObject* obj = empty ? PyBaseObject_Type.tp_new(reinterpret_cast<PyTypeObject*>(cls), empty, nullptr) : nullptr;
  Py_XDECREF(empty);
  PyObject* dict = obj ? PyObject_GenericGetDict(obj, nullptr) : nullptr;  // new ref
  bool ok = dict && set_attributes(o, dict, src);
  Py_XDECREF(dict);
  if (!ok) Py_CLEAR(obj);
  return obj;
}

PyObject* update(const ir::Operand& o, Sources& src) {
  PyObject* node = node_at(o.i, src);
  if (!node) return nullptr;
  if (o.j == 1) {  // a list's new contents, in place (the list object stays the caller's)
    ir::Operand as_list = o;
    as_list.kind = ir::Operand::Kind::List;
    PyObject* items = build(as_list, src);
    int rc = items && PyList_Check(node) ? PyList_SetSlice(node, 0, PY_SSIZE_T_MAX, items) : -1;
    if (items && !PyList_Check(node))
      PyErr_SetString(PyExc_RuntimeError, "trident internal error: list update of an object that is not a list");
    Py_XDECREF(items);
    if (rc < 0) return nullptr;
  } else {
    // a dict's items, or an object's attributes (its instance dictionary)
    PyObject* dict = PyDict_CheckExact(node) ? (Py_INCREF(node), node) : PyObject_GenericGetDict(node, nullptr);
    bool ok = dict && set_attributes(o, dict, src);
    Py_XDECREF(dict);
    if (!ok) return nullptr;
  }
  Py_INCREF(node);
  return node;
}

// The updates, then the tree. The call's argument objects and nodes are borrowed from containers
// an update may change (an attribute replaced drops its old value): held until the tree is built.
PyObject* effects(const ir::Operand& o, Sources& src, size_t nargs) {
  c10::SmallVector<PyObject*, 64> held;
  for (size_t k = 0; k < nargs; ++k) held.push_back(src.arg_objects[k]);
  for (size_t k = 0; k < src.nnodes; ++k) held.push_back(src.nodes[k]);
  for (PyObject* h : held) Py_INCREF(h);
  PyObject* out = nullptr;
  bool ok = !o.items.empty();
  for (size_t k = 0; ok && k + 1 < o.items.size(); ++k) {
    PyObject* r = build(o.items[k], src);
    ok = r != nullptr;
    Py_XDECREF(r);
  }
  if (ok) out = build(o.items.back(), src);
  for (PyObject* h : held) Py_DECREF(h);
  return out;
}

PyObject* build(const ir::Operand& o, Sources& src) {
  using K = ir::Operand::Kind;
  switch (o.kind) {
    case K::Value: return wrap_slot(src.slots, o.i, src.wrapped);
    case K::StateRef: return wrap(src.state[o.i]);
    case K::ArgRef: Py_INCREF(src.arg_objects[o.i]); return src.arg_objects[o.i];
    case K::Sym: {
      if (o.j != 1) return PyLong_FromLongLong(src.out_ints[o.i]);
      double v;  // a float symbol's bits ($fj)
      std::memcpy(&v, &src.out_ints[o.i], sizeof v);
      return PyFloat_FromDouble(v);
    }
    case K::None: Py_RETURN_NONE;
    case K::Bool: return PyBool_FromLong(static_cast<long>(o.i));
    case K::Int: return PyLong_FromLongLong(o.i);
    case K::Float: return PyFloat_FromDouble(o.f);
    case K::Str: return PyUnicode_FromStringAndSize(o.s.data(), static_cast<Py_ssize_t>(o.s.size()));
    case K::Dtype: return torch::autograd::utils::wrap(static_cast<c10::ScalarType>(o.i));
    case K::Device: return THPDevice_New(c10::Device(static_cast<c10::DeviceType>(o.i), static_cast<c10::DeviceIndex>(o.j)));
    case K::Node: {
      PyObject* node = node_at(o.i, src);
      Py_XINCREF(node);
      return node;
    }
    case K::PyRef: {
      PyObject* obj = interned_object(o.i);
      if (!obj) PyErr_SetString(PyExc_RuntimeError, "trident internal error: output tree names an unknown constant");
      Py_XINCREF(obj);
      return obj;
    }
    case K::Object: return new_object(o, src);
    case K::Update: return update(o, src);
    case K::Tuple:
    case K::List: {
      Py_ssize_t n = static_cast<Py_ssize_t>(o.items.size());
      PyObject* c = o.kind == K::Tuple ? PyTuple_New(n) : PyList_New(n);  // new ref
      if (!c) return nullptr;
      for (Py_ssize_t k = 0; k < n; ++k) {
        PyObject* item = build(o.items[k], src);
        if (!item) { Py_DECREF(c); return nullptr; }
        if (o.kind == K::Tuple) PyTuple_SET_ITEM(c, k, item);  // steals item
        else PyList_SET_ITEM(c, k, item);
      }
      return c;
    }
    case K::Dict: {
      PyObject* d = PyDict_New();  // new ref
      if (!d) return nullptr;
      if (!set_attributes(o, d, src)) {  // the key's exact bytes (it may hold NUL or non-ASCII characters)
        Py_DECREF(d);
        return nullptr;
      }
      return d;
    }
    default:
      PyErr_SetString(PyExc_RuntimeError, "trident internal error: unexpected operand in an output tree");
      return nullptr;
  }
}

}  // namespace

PyObject* build_output(const ir::Operand& tree, at::Tensor* slots, PyObject* const* arg_objects, size_t nargs,
                       PyObject* const* nodes, size_t nnodes, const at::Tensor* state, const int64_t* out_ints) {
  Sources src{slots, arg_objects, nodes, nnodes, state, out_ints, {}};
  if (tree.kind == ir::Operand::Kind::Effects) return effects(tree, src, nargs);
  return build(tree, src);
}

}  // namespace trident::bindings
