// Guard compiler: the guards of all specializations of a module become one decision program.
//
// Contract (as JAX's C++ cache states it): a spurious miss is acceptable, a false hit never is.
// select() returns the lowest-numbered specialization whose every guard holds, or -1; that is the
// answer a linear scan of all guard lists in spec order would give, and tests check exactly that.
//
// Shape of the program: specializations are grouped by argument structure (one memcmp per group);
// within a group, guards that every candidate shares are checked once; then the program switches
// on the field whose equality guards best separate the candidates (a dtype, a rank, a size, an int
// value), recursively; only guards that cannot be branched on (ranges, relations between fields)
// are checked per candidate at the leaves. Choosing among N specializations therefore costs a few
// switches, not N guard lists.
#pragma once

#include <string>
#include <vector>

#include "ir/ir.h"

namespace trident::guards {

// C source of `static int32_t trd_select(const trd_call* c)`.
std::string emit_select(const std::vector<ir::Spec>& specs);

// File-scope C a guard expression needs beside itself (no_overlap's sorted state extents), with
// the names it has given out.
struct GuardStatics {
  std::string text;
  int next = 0;
};

// C expression for one guard over `const trd_call* c`. `statics` receives what it needs at file
// scope; a no_overlap guard over module state throws std::logic_error without it.
std::string guard_expr(const ir::Guard& g, GuardStatics* statics = nullptr);

}  // namespace trident::guards
