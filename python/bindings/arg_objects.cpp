#include "arg_objects.h"

#include <vector>

namespace trident::bindings {
namespace {

struct Entry {
  PyObject* obj;          // strong reference, kept for the process's life
  bool flattened = false;  // a class whose instances flatten_args walks by attributes
};

std::vector<Entry>& table() {
  static auto* t = new std::vector<Entry>();  // never destroyed: interpreter shutdown order
  return *t;
}

}  // namespace

int32_t object_class_id(PyTypeObject* type) {
  const auto& t = table();
  for (size_t k = 0; k < t.size(); ++k)
    if (t[k].obj == reinterpret_cast<PyObject*>(type)) return t[k].flattened ? static_cast<int32_t>(k) : -1;
  return -1;
}

int32_t intern_object(PyObject* obj) {
  auto& t = table();
  for (size_t k = 0; k < t.size(); ++k)
    if (t[k].obj == obj) return static_cast<int32_t>(k);
  Py_INCREF(obj);
  t.push_back({obj, false});
  return static_cast<int32_t>(t.size() - 1);
}

PyObject* interned_object(int64_t id) {
  const auto& t = table();
  return id >= 0 && static_cast<size_t>(id) < t.size() ? t[static_cast<size_t>(id)].obj : nullptr;
}

int32_t register_object_class(PyObject* type) {
  int32_t id = intern_object(type);
  table()[static_cast<size_t>(id)].flattened = true;
  return id;
}

int32_t module_argument_id(PyObject* obj) {
  static PyObject* module_type = [] {  // torch.nn.Module, looked up once (a strong reference)
    PyObject* nn = PyImport_ImportModule("torch.nn");
    PyObject* type = nn ? PyObject_GetAttrString(nn, "Module") : nullptr;
    Py_XDECREF(nn);
    if (!type) PyErr_Clear();
    return type;
  }();
  if (!module_type || !PyType_Check(module_type) ||
      !PyType_IsSubtype(Py_TYPE(obj), reinterpret_cast<PyTypeObject*>(module_type)))
    return -1;
  static auto* refs = new std::vector<PyObject*>();  // weak references; never destroyed
  for (size_t k = 0; k < refs->size(); ++k) {
    // borrowed; a dead reference yields None, never equal to a live module
    if (PyWeakref_GetObject((*refs)[k]) == obj) return static_cast<int32_t>(k);
  }
  PyObject* ref = PyWeakref_NewRef(obj, nullptr);
  if (!ref) return -2;
  refs->push_back(ref);
  return static_cast<int32_t>(refs->size() - 1);
}

}  // namespace trident::bindings
