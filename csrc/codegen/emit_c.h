// Code generation: a verified, planned host IR module becomes C11 translation units, each its own
// object: one per specialization (its run function), independent of the spec's place in the module,
// so a spec compiles once whatever is added after it; and the selector (the decision program over
// all specs, guards/decision.h), the only part that changes when a spec is added.
//
// Objects hold code only. What differs between processes for the same program (the call sites',
// kernels' and output tree's text, which name this process's objects and files; the module state's
// addresses the guards compare with) is emitted beside the source and handed to the runtime when the
// object is loaded, so a program compiled once is a cache hit in every later process.
//
// Generated code computes integers only (symbolic sizes, grids, dynamic operands) and calls the
// runtime through trd_rt (trident_abi.h) for everything that touches a tensor.
#pragma once

#include <string>
#include <vector>

#include "guards/decision.h"
#include "ir/ir.h"

namespace trident::codegen {

struct EmittedSpec {
  std::string source;                // complete C, ABI header included
  std::vector<std::string> sites;    // call/launch site k, host IR instruction text
  std::vector<std::string> kernels;  // Triton kernel k its launch sites name, host IR kernel text
  std::string output;                // output tree, host IR return syntax
};

struct EmittedSelector {
  std::string source;                // complete C, ABI header included
  guards::GuardTables tables;        // what its code reads through trd_call.tables
};

struct EmittedModule {
  EmittedSelector selector;        // the decision program
  std::vector<EmittedSpec> specs;  // one per spec, in spec order
};

EmittedSpec emit_spec(const ir::Spec& s);
EmittedSelector emit_selector(const std::vector<ir::Spec>& specs);
EmittedModule emit_module(const ir::Module& m);

// The ABI header text pasted into every module (also part of its content hash).
const char* abi_header_text();

}  // namespace trident::codegen
