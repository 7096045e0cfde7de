// Launching compiled Triton kernels from a module, argument for argument as Triton 3.6's own
// launcher does (make_launcher in its nvidia driver.py): parameters in signature order with
// constexprs and ints equal to 1 already dropped by the compile step, then the global and profile
// scratch pointers (allocated grid * num_ctas * size bytes from the caching allocator on the launch
// stream when the kernel needs them, else 0); cuLaunchKernelEx with cluster, PDL and cooperative attributes; dynamic
// shared memory above 48 KB opted in once per function; the caller's current stream and device.
// Every driver call is checked and a failure names the kernel.
#pragma once

#include <array>
#include <atomic>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <c10/util/SmallVector.h>

#include "ir/ir.h"
#include "runtime/launch/tma_args.h"
#include "runtime/module/frame.h"

namespace trident::runtime {

// TmaDesc: a host-side tensor descriptor the kernel lowered to TMA, a CUtensorMap passed by value,
// encoded at each launch from the launch's tensor (tma_args.h) as Triton's launcher encodes it.
enum class CType : uint8_t { Ptr, I1, I8, U8, I16, U16, I32, U32, I64, U64, Fp16, Bf16, Fp32, Fp64, TmaDesc };

// One kernel of a module: declaration, cubin bytes, and its CUfunction per device (loaded lazily,
// once; a module may be loaded in a process that never launches).
class KernelInfo {
 public:
  explicit KernelInfo(ir::Kernel decl);
  const ir::Kernel& decl() const { return decl_; }
  const std::vector<CType>& params() const { return params_; }
  // Per parameter, the index of its TMA metadata in tma() (TmaDesc parameters), else -1.
  const std::vector<int32_t>& tma_of_param() const { return tma_of_param_; }
  const std::vector<TmaMeta>& tma() const { return tma_; }
  // CUfunction (as void*) for `device`, loading the cubin on first use. After that first load the
  // lookup is one atomic read (no lock): it runs on every launch.
  void* function(int device) const {
    if (device >= 0 && device < kMaxDevices)
      if (void* fn = loaded_[device].load(std::memory_order_acquire)) return fn;
    return load(device);
  }

 private:
  static constexpr int kMaxDevices = 64;
  void* load(int device) const;
  ir::Kernel decl_;
  std::vector<CType> params_;
  std::vector<int32_t> tma_of_param_;
  std::vector<TmaMeta> tma_;
  std::string cubin_;
  mutable std::mutex mu_;
  mutable std::unordered_map<int, void*> functions_;
  mutable std::array<std::atomic<void*>, kMaxDevices> loaded_{};
};

struct LaunchArgs;  // launch_args.h

struct LaunchSite {
  struct Param {
    enum class Kind : uint8_t { Tensor, Int, Dyn, Float, DynFloat } kind = Kind::Int;
    ir::Operand ref;  // Tensor: location; Dyn, DynFloat: dyn index in ref.i (DynFloat: a double's bits)
    int64_t i = 0;    // Int: the value; Tensor: a byte offset added to the data pointer (ptr(...))
    int32_t offset_dyn = -1;  // Tensor: the dyn index of a further byte offset, or -1
    double f = 0.0;
  };
  int32_t kernel = 0;
  std::string name;
  std::vector<Param> params;

  int32_t ndyn = 0;  // the dyn values the site reads (dyn_count)

  // Launches on the current stream of the kernel's device; that stream (a CUstream), or nullptr for an
  // empty grid (nothing launched). slots_out: the parameter slots it passed, scratch pointers included.
  void* launch(trd_frame& f, const KernelInfo& k, const uint32_t* grid, const int64_t* dyn,
                  c10::SmallVector<uint64_t, 16>* slots_out = nullptr) const;
  // The parameters a launch with these dyn values passes, the scratch pointers' slots left 0.
  void fill(const trd_frame& f, const KernelInfo& k, const int64_t* dyn, LaunchArgs& a) const;
};

// Resolve a launch instruction in site form against its kernel's parameter list.
LaunchSite resolve_launch(const ir::Instr& in, const KernelInfo& k);

}  // namespace trident::runtime
