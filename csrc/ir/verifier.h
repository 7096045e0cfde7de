// Structural checks on host IR. A module that passes can be planned and emitted; anything the
// verifier rejects is a bug in whoever produced the IR (the lowering or a pass), reported with the
// spec, the instruction and the rule broken.
#pragma once

#include <stdexcept>
#include <string>

#include "ir/ir.h"

namespace trident::ir {

struct VerifyError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Number of leaves an argument structure string describes (see python/bindings/flatten.h).
int count_structure_leaves(const std::string& structure);

void verify(const Module& m);
void verify(const Spec& s);

}  // namespace trident::ir
