// One Triton launch's parameters as cuLaunchKernelEx takes them (triton_launch.h: LaunchSite::fill).
// Apart from triton_launch.h because it needs cuda.h, which only the runtime's sources see.
#pragma once

#include <c10/util/SmallVector.h>
#include <cuda.h>

#include <cstddef>
#include <cstdint>

namespace trident::runtime {

constexpr size_t kMaxTmaParams = 8;

// Per parameter an 8-byte slot (or, for a tensor descriptor, its CUtensorMap) and a pointer to it,
// then the two scratch pointers' slots. Not copyable in effect: ptrs point into slots and maps.
struct LaunchArgs {
  c10::SmallVector<uint64_t, 16> slots;
  c10::SmallVector<void*, 18> ptrs;
  CUtensorMap maps[kMaxTmaParams];  // by value, 64-byte aligned by its type, as the kernel takes them
  size_t nmaps = 0;
  int device = -1;  // the device of the first tensor parameter, -1 without one
};

}  // namespace trident::runtime
