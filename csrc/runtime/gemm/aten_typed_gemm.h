// Typed entry points for the GEMM ops (aten_typed.cpp's find_typed chooses them): mm and F.linear
// through the site's cuBLASLt plan (lt_gemm.h) into reused buffers, bmm and addmm through their
// typed handles.
#pragma once

#include <cstdint>

#include "runtime/aten/aten_site.h"

namespace trident::runtime::typed {

void mm(const AtenSite& s, trd_frame& f, const int64_t* dyn);
void bmm(const AtenSite& s, trd_frame& f, const int64_t* dyn);
void addmm(const AtenSite& s, trd_frame& f, const int64_t* dyn);
void linear(const AtenSite& s, trd_frame& f, const int64_t* dyn);

// Whether linear sites of modules loaded from now on multiply a contiguous N-D input without views
// (AtenSite::linear_nd). Off unless TRIDENT_LINEAR_ND=1 or switched on here: on the HF Llama's step
// its kernels take the same device time but the wall time measured longer, in the gaps between
// launches (benchmarks/NOTES.md has the runs). Returns the previous setting.
bool set_linear_nd_for_new_modules(bool on);
bool linear_nd_for_new_modules();

}  // namespace trident::runtime::typed
