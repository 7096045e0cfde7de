#include "result_objects.h"

#include <Python.h>

#include <c10/core/TensorImpl.h>
#include <torch/csrc/autograd/python_variable.h>

#include "runtime/memory/buffer_reuse.h"

namespace trident::bindings {
namespace {

using runtime::ResultObject;

// The state of the Python object of a tensor the pool holds, for reuse_outputs. With PyTorch's
// PyObject preservation (torch >= 2.10) a Python tensor holds its TensorImpl, and the TensorImpl
// holds its Python object while anything else (the pool) holds the TensorImpl: after the caller
// drops a result, the object lives on with one reference, the TensorImpl's, and THPVariable_Wrap
// returns that same object when the TensorImpl goes out again. It may go out again only as the
// call made it: of torch.Tensor's own type, with no attributes set on it (its __dict__ is empty) and
// no weak references to it (a weakref would see a later call's result). Runs under the GIL.
ResultObject result_object_state_locked(const c10::TensorImpl& impl) {
  PyObject* obj = impl.pyobj_slot()->load_pyobj();
  if (obj == nullptr) return ResultObject::kNone;
  if (Py_REFCNT(obj) != 1) return ResultObject::kHeld;
  PyTypeObject* type = Py_TYPE(obj);
  if (type != reinterpret_cast<PyTypeObject*>(THPVariableClass)) return ResultObject::kChanged;
  // tp_weaklistoffset locates the list head for both layouts (3.11's slot, 3.12's managed weakref).
  if (type->tp_weaklistoffset != 0 &&
      *reinterpret_cast<PyObject**>(reinterpret_cast<char*>(obj) + type->tp_weaklistoffset) != nullptr)
    return ResultObject::kChanged;
  // Materializes the managed __dict__ the first time it is asked for one object, a plain read after.
  PyObject** dict = _PyObject_GetDictPtr(obj);
  if (dict == nullptr && PyErr_Occurred()) {
    PyErr_Clear();
    return ResultObject::kChanged;  // cannot tell: let the object go
  }
  if (dict != nullptr && *dict != nullptr && PyDict_GET_SIZE(*dict) != 0) return ResultObject::kChanged;
  return ResultObject::kAsMade;
}

ResultObject result_object_state(const c10::TensorImpl& impl) {
  // Called from a run, which may have released the GIL (scm_call.cpp: run_spec).
  if (!t_running_without_gil) return result_object_state_locked(impl);
  PyGILState_STATE gil = PyGILState_Ensure();
  ResultObject r = result_object_state_locked(impl);
  PyGILState_Release(gil);
  return r;
}

}  // namespace

void install_result_object_check() { runtime::ReusePool::set_object_check(&result_object_state); }

}  // namespace trident::bindings
