#include "arg_objects.h"

#include <unordered_map>
#include <utility>
#include <vector>

namespace trident::bindings {
namespace {

// The objects by number, strong references kept for the process's life.
std::vector<PyObject*>& table() {
  static auto* t = new std::vector<PyObject*>();  // never destroyed: interpreter shutdown order
  return *t;
}

// Object -> its number in table(): intern_object runs on every call for each class or enum member
// argument (flatten.cpp: add_constant's c<N> and e<N>). Entries are never removed, and each holds
// a strong reference, so an address never comes to mean another object.
std::unordered_map<PyObject*, int32_t>& index() {
  static auto* m = new std::unordered_map<PyObject*, int32_t>();  // never destroyed, as table()
  return *m;
}

// The flattened classes alone, with their numbers: what object_class_id scans on every call for
// each argument that is not a tensor, number, container or None. A handful of classes, where the
// whole table holds every class, enum member and constant a program names (over a hundred after a
// generate()).
std::vector<std::pair<PyObject*, int32_t>>& flattened_classes() {
  static auto* c = new std::vector<std::pair<PyObject*, int32_t>>();  // never destroyed, as table()
  return *c;
}

}  // namespace

int32_t object_class_id(PyTypeObject* type) {
  for (const auto& [cls, id] : flattened_classes())
    if (cls == reinterpret_cast<PyObject*>(type)) return id;
  return -1;
}

int32_t intern_object(PyObject* obj) {
  auto [it, added] = index().try_emplace(obj, static_cast<int32_t>(table().size()));
  if (added) {
    Py_INCREF(obj);
    table().push_back(obj);
  }
  return it->second;
}

PyObject* interned_object(int64_t id) {
  const auto& t = table();
  return id >= 0 && static_cast<size_t>(id) < t.size() ? t[static_cast<size_t>(id)] : nullptr;
}

int32_t register_object_class(PyObject* type) {
  const int32_t id = intern_object(type);
  if (object_class_id(reinterpret_cast<PyTypeObject*>(type)) < 0) flattened_classes().emplace_back(type, id);
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
