// Mapping core exceptions to Python ones at the binding boundary (common/errors.h): IR the caller
// got wrong (ParseError, VerifyError) is a ValueError; a broken invariant of trident (InternalError)
// is a RuntimeError that says it is trident's bug; anything else is a RuntimeError with the message.
#pragma once

#include <Python.h>

#include <exception>

#include "codegen/cache_dir.h"
#include "common/errors.h"
#include "ir/text.h"
#include "ir/verifier.h"

namespace trident::bindings {

inline void set_python_error(const std::exception& e) {
  if (dynamic_cast<const InternalError*>(&e)) {
    PyErr_Format(PyExc_RuntimeError,
                 "trident internal error (a bug in trident, not in your program; please report it with the "
                 "output of trident.explain(fn)): %s",
                 e.what());
    return;
  }
  bool caller = dynamic_cast<const ir::ParseError*>(&e) || dynamic_cast<const ir::VerifyError*>(&e);
  PyErr_SetString(caller ? PyExc_ValueError : PyExc_RuntimeError, e.what());
}

// The cache's pending warnings (an unusable directory, a rejected entry) as Python RuntimeWarnings.
// False when a warning filter turned one into an exception (then set).
inline bool emit_cache_warnings() {
  for (const auto& w : codegen::take_cache_warnings())
    if (PyErr_WarnEx(PyExc_RuntimeWarning, w.c_str(), 1) < 0) return false;
  return true;
}

}  // namespace trident::bindings
