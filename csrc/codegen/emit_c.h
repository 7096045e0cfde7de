// Code generation: a verified, planned host IR module becomes C11 translation units, each its own
// object: one per specialization (its run function and the tables of call sites, kernels and output
// tree the runtime resolves at load), independent of the spec's place in the module, so a spec
// compiles once whatever is added after it; and the selector (the decision program over all specs,
// guards/decision.h), the only part that changes when a spec is added.
//
// Generated code computes integers only (symbolic sizes, grids, dynamic operands) and calls the
// runtime through trd_rt (trident_abi.h) for everything that touches a tensor.
#pragma once

#include <string>
#include <vector>

#include "ir/ir.h"

namespace trident::codegen {

struct EmittedModule {
  std::string selector;            // the decision program's source
  std::vector<std::string> specs;  // one source per spec, in spec order
};

// Complete C sources, ABI header included.
std::string emit_spec(const ir::Spec& s);
std::string emit_selector(const std::vector<ir::Spec>& specs);
EmittedModule emit_module(const ir::Module& m);

// The ABI header text pasted into every module (also part of its content hash).
const char* abi_header_text();

}  // namespace trident::codegen
