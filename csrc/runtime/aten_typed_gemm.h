// Typed entry points for the GEMM ops (aten_typed.cpp's find_typed chooses them): mm and F.linear
// through the site's cuBLASLt plan (lt_gemm.h) into reused buffers, bmm and addmm through their
// typed handles.
#pragma once

#include <cstdint>

#include "runtime/aten_site.h"

namespace trident::runtime::typed {

void mm(const AtenSite& s, trd_frame& f, const int64_t* dyn);
void bmm(const AtenSite& s, trd_frame& f, const int64_t* dyn);
void addmm(const AtenSite& s, trd_frame& f, const int64_t* dyn);
void linear(const AtenSite& s, trd_frame& f, const int64_t* dyn);

}  // namespace trident::runtime::typed
