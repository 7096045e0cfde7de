"""Per-call host time of the suite's cases, every mode and the native floor timed in turn (GPU machine).

    python3 benchmarks/percall_interleaved.py [--cycles 8] [--modes eager,trident]

run.py times each case once per mode, seconds to minutes apart, and the host's speed drifts by up to
a third within a minute: two cases' figures from one run can differ by drift alone. Here each cycle
times the native floor and then every case under every mode, `cycles` times, in one process; a
case's figure is the median over cycles of its time over the floor of the same cycle. Two cases of
its own separate a launch from the allocation before it: `add_one_into` and `noop_into` write into
an output they are given; two launch nothing: `identity` returns its argument (the cost of entering
and leaving a call) and `empty_like` returns a new tensor (that and a returned tensor's cost). Each
cycle also times two Triton-ABI floors (native_floor.cu): `triton`, cuLaunchKernelEx of an empty
kernel with add_one's parameters as Triton's launcher and trident issue it, and `params`, the same
launch through cuLaunchKernel; they separate what a Triton launch costs the driver from the host
work around it. A diagnostic for where per-call time goes, not part of the suite.
"""
import argparse
import statistics
import tempfile

import torch
import triton

import cases
import kernels
import modes
import timing


def add_one_into(x, out):
    kernels.add_one_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
    return out


def noop_into(x, out):
    kernels.noop_kernel[(1,)](out)
    return out


def identity(x):
    return x


def empty_like(x):
    return torch.empty_like(x)


def all_cases(device):
    """(name, fn, args) of the suite's cases, the two without an allocation, and two without a launch:
    `identity` (entering and leaving a compiled call) and `empty_like` (that and a returned tensor)."""
    rows = [(name, fn, make_args(device)) for name, _, fn, make_args, _, _ in cases.CASES]
    x = torch.randn(4096, device=device)
    rows += [("add_one_into", add_one_into, (x, torch.empty_like(x))), ("noop_into", noop_into, (x, torch.empty_like(x))),
             ("identity", identity, (x,)), ("empty_like", empty_like, (x,))]
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cycles", type=int, default=8)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--modes", default="eager,trident")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        exe, why = timing.build_native_floor(tmp)
        if exe is None:
            raise SystemExit(f"native floor unavailable: {why}")
        built = {}
        with torch.no_grad():
            for mode in a.modes.split(","):
                for name, fn, args in all_cases("cuda"):
                    modes.reset(mode)
                    f = modes.build(mode, fn)
                    f(*args)
                    built[(name, mode)] = (f, args)
            floors = {"plain": [], "triton": [], "params": []}
            ratios = {k: [] for k in built}
            abi_ratios = {k: [] for k in built}
            times = {k: [] for k in built}
            for _ in range(a.cycles):
                for abi, got in floors.items():
                    fl = timing.run_native_floor(exe, 5000, 5, abi=abi)
                    if fl["status"] != modes.OK:
                        raise SystemExit(f"native floor ({abi}) failed: {fl['message']}")
                    got.append(fl["us"])
                for key, (f, args) in built.items():
                    us, _ = timing.host_us_per_call(f, args, calls=a.calls, repeats=1, warmup=20)
                    times[key].append(us)
                    ratios[key].append(us / floors["plain"][-1])
                    abi_ratios[key].append(us / floors["triton"][-1])
    for abi, fl in floors.items():
        print(f"native floor ({abi}), µs: median {statistics.median(fl):.2f} (min {min(fl):.2f}, "
              f"max {max(fl):.2f}) over {a.cycles} cycles")
    print(f"{'case':16s} {'mode':10s} {'µs median':>10s} {'min':>7s} {'max':>7s} {'x floor (same cycle)':>21s} "
          f"{'x triton-ABI floor':>19s}")
    for (name, mode), ts in times.items():
        print(f"{name:16s} {mode:10s} {statistics.median(ts):10.2f} {min(ts):7.2f} {max(ts):7.2f} "
              f"{statistics.median(ratios[(name, mode)]):21.2f} {statistics.median(abi_ratios[(name, mode)]):19.2f}")


if __name__ == "__main__":
    main()
