// The per-call state a generated module's run function works on (trd_frame in trident_abi.h).
// Lives on the bindings' stack for the duration of one call; holds no Python object.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "abi/trident_abi.h"

namespace trident::runtime {
class LoadedSpec;
class ReusePool;
class ScalarPatch;
}

struct trd_frame {
  const trident::runtime::LoadedSpec* spec = nullptr;  // the spec running (its sites and kernels)
  trident::runtime::ReusePool* pool = nullptr;          // the module's kept buffers (buffer_reuse.h)
  at::Tensor* slots = nullptr;              // the running spec's values, owned by this frame
  const at::Tensor* const* args = nullptr;  // per user leaf; nullptr for non-tensor leaves (borrowed)
  const at::Tensor* state = nullptr;        // captured module state (borrowed)
  int32_t nargs = 0;
  int32_t nstate = 0;
  bool below_autograd = false;              // the run cannot record autograd history (scm_call.cpp)
  bool keeps_buffers = true;                // no Python dispatch mode sees the run (buffer_reuse.h)
  // Graph mode (scalar_patch.h): the capture run records its sites here, or the run is a patch of a
  // graph's nodes (sites issue nothing). nullptr: a plain run.
  trident::runtime::ScalarPatch* patch = nullptr;
  std::string error;                        // set by a failing runtime call
  // The kind of c10 error it was, so the caller gets the Python type eager's op raises (c10's
  // IndexError is Python's IndexError, and so on); kRuntime for anything else.
  // kBranchMiss: not an error: the call's data took another branch than the program's (`expect`),
  // before the program wrote anything; the caller runs another specialization.
  enum class ErrorKind : uint8_t { kRuntime, kIndex, kValue, kType, kNotImplemented, kZeroDivision, kOverflow, kBranchMiss } error_kind = ErrorKind::kRuntime;
};
