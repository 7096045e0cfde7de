// Code generation: a verified, planned host IR module becomes one C11 translation unit, the
// Specialization Cache Module. It holds the decision program (guards/decision.h), one run function
// per specialization, and the tables of call sites and output trees the runtime resolves at load.
//
// Generated code computes integers only (symbolic sizes, grids, dynamic operands) and calls the
// runtime through trd_rt (trident_abi.h) for everything that touches a tensor.
#pragma once

#include <string>

#include "ir/ir.h"

namespace trident::codegen {

struct EmittedModule {
  std::string source;  // complete C source, ABI header included
};

EmittedModule emit_module(const ir::Module& m);

// The ABI header text pasted into every module (also part of its content hash).
const char* abi_header_text();

}  // namespace trident::codegen
