// Mapping core exceptions to Python ones at the binding boundary: IR the caller got wrong
// (ParseError, VerifyError) is a ValueError; anything else is a RuntimeError with the message.
#pragma once

#include <Python.h>

#include <exception>

#include "ir/text.h"
#include "ir/verifier.h"

namespace trident::bindings {

inline void set_python_error(const std::exception& e) {
  bool caller = dynamic_cast<const ir::ParseError*>(&e) || dynamic_cast<const ir::VerifyError*>(&e);
  PyErr_SetString(caller ? PyExc_ValueError : PyExc_RuntimeError, e.what());
}

}  // namespace trident::bindings
