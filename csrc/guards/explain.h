// The cold side of guards: evaluate one guard against a call and say why it failed. Used by
// trident.explain and by recompile logs; never on the hot path, which only runs the generated
// decision program. Mirrors guards/decision.cpp's guard_expr exactly (tests compare the two).
#pragma once

#include <string>

#include "abi/trident_abi.h"
#include "ir/ir.h"

namespace trident::guards {

int64_t read_field(const ir::Field& f, const trd_call& c);
bool check_guard(const ir::Guard& g, const trd_call& c);

// Whether the decision program would accept `spec` for this call (its structure, leaf count and
// guards all hold): first_failure's answer without its words, cheap enough to select with.
bool accepts(const ir::Spec& spec, const trd_call& c);

// First failing guard of `spec` for this call, described with the actual value; "" if all hold.
std::string first_failure(const ir::Spec& spec, const trd_call& c);

}  // namespace trident::guards
