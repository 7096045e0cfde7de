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

// Data a decision program reads beside its code: no_overlap's module state extents, sorted by start
// with a running maximum of their ends, one table per use. They are addresses of this process's
// tensors, so they are not compiled in (the same guards make the same object in every process and
// every module): the generated code reads table k as c->tables[k], and the runtime hands these
// over with each call (trd_call.tables). Also pick tables, [n, value, spec, value, spec, ...] with
// values ascending: a split on one field where each value leads to one spec with nothing more to
// check, looked up instead of compiled as a case per spec.
struct GuardTables {
  std::vector<std::vector<int64_t>> tables;  // [start, running end] pairs, flattened
};

struct EmittedSelect {
  std::string source;  // `static int32_t trd_select(const trd_call* c)` and its helpers
  GuardTables tables;
  int32_t ids_named = 0;  // 1 + the highest spec id the source names (the rest are in tables)
};

EmittedSelect emit_select(const std::vector<ir::Spec>& specs);

// C expression for one guard over `const trd_call* c`. A no_overlap guard over module state adds
// its tables to `tables` (std::logic_error without it).
std::string guard_expr(const ir::Guard& g, GuardTables* tables = nullptr);

}  // namespace trident::guards
