// Python objects that arguments hold besides tensors and numbers: the table of plain classes whose
// instances are flattened natively by their attributes (a transformers cache and its layers, a
// dataclass), and the constants a specialization refers to by number (those classes, and class
// values of attributes). The Python layer decides which classes qualify (arg_objects.py); the hot
// path only looks them up. Process-wide, read and written under the GIL; entries hold strong
// references and are never removed, so a number always means the same object.
#pragma once

#include <Python.h>

#include <cstdint>

namespace trident::bindings {

// The class's number if its instances are flattened by attributes, else -1.
int32_t object_class_id(PyTypeObject* type);

// The number of `obj` in the table (added on first sight; same object, same number).
int32_t intern_object(PyObject* obj);

// Borrowed; nullptr for a number not in the table.
PyObject* interned_object(int64_t id);

// Mark a class (already interned or not) as flattened by its attributes; returns its number.
int32_t register_object_class(PyObject* type);

// A `torch.nn.Module` passed as an argument itself (not inside a container): its number in a
// second table, of weak references, so that the table keeps no model alive. The structure string
// holds "M<number>": a call with another module, or with a new module at a dead one's address,
// gets another number (a dead entry never matches), so no specialization serves a module it was
// not captured with. -1 when obj is not a module; -2 with a Python error set when the table
// cannot take it.
int32_t module_argument_id(PyObject* obj);

}  // namespace trident::bindings
