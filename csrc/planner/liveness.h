// Liveness: after the last use of each value a call produced, insert `release %v`, so that the
// frame drops its reference and the caching allocator can reuse the memory within the same call,
// as eager would when a Python temporary dies. Arguments and state are never released (the frame
// does not own them); values that reach the return are kept.
#pragma once

#include "ir/ir.h"

namespace trident::planner {

// Idempotent: existing release instructions are dropped and recomputed.
void insert_releases(ir::Spec& spec);

}  // namespace trident::planner
