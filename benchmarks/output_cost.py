"""What a returned tensor costs the host, by parts: the caching allocator's allocate and free alone,
then with a TensorImpl around the memory (at::detail::empty_generic, what trident's allocation
sites call), then with the Python object wrapped and released (THPVariable_Wrap, what trident's
outputs go through), each a C++ loop, beside the native launch floor of the same run.

    python3 benchmarks/output_cost.py [--numel N] [--calls N] [--rounds N] [--device cpu]

A diagnostic for the per-call cases (benchmarks/NOTES.md, session 16): a one-kernel call that
returns a new tensor costs ~2 µs more than one that writes into an output it is given. The loops
are compiled at run time with torch.utils.cpp_extension (tens of seconds on first use). Each round
times the floor and the three loops in turn; medians over rounds are printed.
"""
import argparse
import statistics
import tempfile

import torch
from torch.utils.cpp_extension import load_inline

import timing

SOURCE = r"""
#include <torch/extension.h>
#include <ATen/EmptyTensor.h>
#include <c10/core/Allocator.h>
#include <torch/csrc/autograd/python_variable.h>

#include <chrono>

namespace {

c10::DeviceType type_of(bool cuda) { return cuda ? c10::DeviceType::CUDA : c10::DeviceType::CPU; }

template <typename Body>
double us_per_iteration(int64_t n, Body body) {
  for (int64_t i = 0; i < 100; ++i) body();  // the allocator's free lists hold the block after this
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < n; ++i) body();
  const std::chrono::duration<double, std::micro> dt = std::chrono::steady_clock::now() - t0;
  return dt.count() / static_cast<double>(n);
}

at::Tensor fresh(int64_t numel, bool cuda) {
  return at::detail::empty_generic({numel}, c10::GetAllocator(type_of(cuda)), c10::DispatchKeySet(
      cuda ? c10::DispatchKey::CUDA : c10::DispatchKey::CPU), at::kFloat, std::nullopt);
}

}  // namespace

// The allocator's allocate and free of numel floats, nothing around them.
double raw_us(int64_t n, int64_t numel, bool cuda) {
  c10::Allocator* a = c10::GetAllocator(type_of(cuda));
  const size_t bytes = static_cast<size_t>(numel) * sizeof(float);
  return us_per_iteration(n, [&] { c10::DataPtr p = a->allocate(bytes); });
}

// The same with a TensorImpl and StorageImpl around the memory, made and released.
double tensor_us(int64_t n, int64_t numel, bool cuda) {
  return us_per_iteration(n, [&] { at::Tensor t = fresh(numel, cuda); });
}

// The same, wrapped in a new Python object and released through it (the GIL is held: pybind11).
double python_us(int64_t n, int64_t numel, bool cuda) {
  return us_per_iteration(n, [&] {
    PyObject* obj = THPVariable_Wrap(fresh(numel, cuda));
    Py_XDECREF(obj);
  });
}
"""


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--numel", type=int, default=4096, help="floats per tensor (add_one's output: 4096)")
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = p.parse_args()
    cuda = a.device == "cuda"
    if cuda:
        torch.zeros(1, device="cuda")  # the CUDA context and the caching allocator exist before timing
    ext = load_inline("trident_output_cost", cpp_sources=SOURCE, functions=["raw_us", "tensor_us", "python_us"],
                      extra_cflags=["-O2"], verbose=False)
    parts = {"allocate + free": ext.raw_us, "+ TensorImpl": ext.tensor_us, "+ Python object": ext.python_us}
    got = {name: [] for name in parts}
    floors = []
    with tempfile.TemporaryDirectory() as tmp:
        exe = timing.build_native_floor(tmp)[0] if cuda else None
        with timing.pinned():
            for _ in range(a.rounds):
                if exe:
                    fl = timing.run_native_floor(exe, 5000, 5)
                    if fl["status"] == "ok":
                        floors.append(fl["us"])
                for name, fn in parts.items():
                    got[name].append(fn(a.calls, a.numel, cuda))
    print(f"{a.device}, {a.numel} floats, {a.rounds} rounds of {a.calls} iterations: median µs per iteration (min-max)")
    before = 0.0
    for name, samples in got.items():
        med = statistics.median(samples)
        print(f"{name:18s} {med:7.3f} ({min(samples):.3f}-{max(samples):.3f})   this part {med - before:7.3f}")
        before = med
    if floors:
        print(f"{'native floor':18s} {statistics.median(floors):7.3f} ({min(floors):.3f}-{max(floors):.3f})")


if __name__ == "__main__":
    main()
