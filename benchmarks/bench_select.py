"""Cost of a hit as the number of specializations grows.

One Specialization Cache Module per row, holding 1, 8 or 64 specializations of a tiny function
(`x + k * x` with the int k baked in, or the same function specialized on x's dtype). Every spec has
the guards the lowering emits for its call (trident.lowering.lower.guard_lines: kind, dtype, device, rank,
flags, keyset, every size and stride, the int's value, grad mode) and a one-op body:

    %0 = arg 0
    %1 = call "aten::add.Tensor" (%0, %0, k)
    return %1

The specs are added with SCM.add_spec (what a miss does after capture and lowering; trident.compile
would run torch.export once per spec, which takes far longer than this benchmark). A hit is one
native call: flatten the arguments, run the decision program, run the host program (one ATen op),
build the output. The table gives µs per hit of the first and of the last-added specialization,
the median over repeats of `time.perf_counter_ns` around a loop of `--calls` calls; eager
`torch.add(x, x, alpha=k)` is timed the same way for scale.

    python3 benchmarks/bench_select.py                 # CPU
    python3 benchmarks/bench_select.py --device cuda   # host overhead with CUDA tensors
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import trident  # noqa: F401  (loads the extension after torch)
from trident import _C
from trident.lowering.guard_text import guard_lines

SPEC_COUNTS = (1, 8, 64)
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32,
          torch.int16, torch.int8, torch.uint8, torch.complex64]


def spec_text(args: tuple, alpha: int, grad: bool) -> str:
    structure, leaves = _C.describe_args(*args)
    lines = [f'spec 0 structure "{structure}" {{']
    lines += ["  " + g for g in guard_lines(structure, leaves, grad)]
    lines += ["  %0 = arg 0", f'  %1 = call "aten::add.Tensor" (%0, %0, {alpha})', "  return %1", "}"]
    return "\n".join(lines) + "\n"


def _no_miss(*args, **kwargs):
    raise AssertionError(f"benchmark call missed: {_C.describe_args(*args, **kwargs)[0]}")


def build(n: int, vary: str, x: torch.Tensor):
    """An SCM with n specializations and the argument tuples of its first and last spec."""
    scm = _C.SCM(_no_miss)
    calls = []
    grad = torch.is_grad_enabled()
    for k in range(n):
        if vary == "int":
            args = (x, k)
        else:  # dtype: the int stays, the tensor's dtype changes (n is capped by the dtype list)
            args = (x.to(DTYPES[k % len(DTYPES)]), k // len(DTYPES))
        scm.add_spec(spec_text(args, k % 5 + 1, grad))
        calls.append(args)
    for k, args in enumerate(calls):  # every spec is selected for its own call and computes x + alpha*x
        assert scm.select(*args) == k, (k, scm.explain_call(*args))
        alpha = k % 5 + 1
        torch.testing.assert_close(scm(*args), torch.add(args[0], args[0], alpha=alpha))
    return scm, calls[0], calls[-1]


def time_per_call(fn, args: tuple, calls: int, repeats: int, sync) -> float:
    """Median over repeats of µs per call."""
    samples = []
    for _ in range(repeats + 1):  # the first round warms up
        sync()
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn(*args)
        sync()
        samples.append((time.perf_counter_ns() - t0) / calls / 1000.0)
    return statistics.median(samples[1:])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--calls", type=int, default=20_000, help="calls per timed loop (default 20000)")
    p.add_argument("--repeats", type=int, default=5, help="timed loops per cell; the median is reported")
    p.add_argument("--vary", choices=["int", "dtype", "both"], default="both",
                   help="what separates the specializations: an int argument's value, x's dtype, or both tables")
    p.add_argument("--shape", default="4,4", help="x's shape (default 4,4)")
    a = p.parse_args(argv)

    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        p.error(f"--device {a.device}: this torch ({torch.__version__}) sees no CUDA device")
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    shape = tuple(int(s) for s in a.shape.split(",") if s)
    x = torch.randn(shape, device=device)

    print(f"torch {torch.__version__}, device {device}, x {list(shape)}, {a.calls} calls x {a.repeats} repeats, "
          f"grad mode {torch.is_grad_enabled()}; median µs per call")
    eager = time_per_call(lambda t, k: torch.add(t, t, alpha=k), (x, 2), a.calls, a.repeats, sync)
    print(f"eager torch.add(x, x, alpha=k): {eager:.2f} µs\n")

    for vary in (["int", "dtype"] if a.vary == "both" else [a.vary]):
        what = "the int argument k" if vary == "int" else f"x.dtype (and k past {len(DTYPES)} dtypes)"
        print(f"specializations differ by: {what}")
        print(f"{'specs':>6} {'build s':>8} {'µs/hit first':>13} {'µs/hit last':>12}")
        for n in SPEC_COUNTS:
            t0 = time.perf_counter()
            scm, first, last = build(n, vary, x)
            built = time.perf_counter() - t0
            t_first = time_per_call(scm, first, a.calls, a.repeats, sync)
            t_last = time_per_call(scm, last, a.calls, a.repeats, sync)
            c = scm.counters()
            assert c["misses"] == 0 and c["hits"] > 0, c
            print(f"{n:>6} {built:>8.2f} {t_first:>13.2f} {t_last:>12.2f}")
        print()


if __name__ == "__main__":
    main()
