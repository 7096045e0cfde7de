// trident._C.SCM: the native callable (its call: scm_call.cpp; its type and cold methods: scm_object.cpp).
#pragma once

#include <Python.h>

namespace trident::bindings {

bool register_scm_type(PyObject* module);

// Captured module state may have been re-registered somewhere: every SCM re-checks it once.
void bump_state_epoch();

}  // namespace trident::bindings
