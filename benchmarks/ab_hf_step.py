"""A/B in one process: the HF Llama's decode step compiled as trident compiles it, against the same
step compiled with one of trident's changes switched off. Host submit and wall time per step, the
variants interleaved (in alternating order) so that the host's drift hits both alike; with --graph,
also each variant's device time with its step captured in a CUDA graph, which tells a change to the
kernels' time from one to the gaps between kernels launched one by one.

    python benchmarks/ab_hf_step.py [--off CHANGE] [--batch B] [--rounds N] [--graph] [--device cpu]

CHANGE (default mask) is one of OFF's keys:
- mask: the two capture passes that convert the attention mask once per step (sdpa decomposed at
  capture, _compat._capture_decompositions; equal pure calls merged, cse.py);
- int_adds: the builtin integer adds (a decoder's cache positions) stay ATen calls;
- index_copy: the StaticCache's one-position index_copy_ writes stay ATen calls;
- clone: repeat_kv's clones stay ATen calls;
- mul: the builtin products (the MLP's act(gate) * up, the rotary scaling) stay ATen calls;
- where: the attention mask's conversion (where of the mask, 0.0 and the dtype's minimum) stays an
  ATen call;
- convert: the rotary's dtype conversions (positions to fp32, cos and sin to the model's dtype) stay
  ATen calls;
- linear_nd: the linears of [B, 1, K] activations flatten them to 2-D and view the result back, as
  ATen's linear does (csrc/runtime/gemm/aten_typed_gemm.h). The change is off by default: run with
  TRIDENT_LINEAR_ND=1 so that "as built" has it;
- aten_replay: cuDNN attention never replays its recorded launches (csrc/runtime/replay/op_replay.h).

A diagnostic: it switches the change off by patching trident's modules (or, for linear_nd and
aten_replay, the native runtime's switch) for the second variant's compile only. Both variants
must equal eager bit for bit, or it stops. On the CPU (a smoke test) it runs the tiny HF config."""
import argparse
import contextlib
import os
import statistics
import sys
from pathlib import Path
from unittest import mock

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hf_llama  # noqa: E402
import timing  # noqa: E402
from profile_host import submit_us_per_step  # noqa: E402


@contextlib.contextmanager
def _native_switch_off(name: str):
    """Modules loaded inside have one of the native runtime's changes off: _C.<name>(on) -> previous
    (_set_aten_replay: no ATen replay sites, csrc/runtime/replay/op_replay.h; _set_linear_nd: N-D linear
    inputs flattened as ATen does, csrc/runtime/gemm/aten_typed_gemm.h)."""
    from trident import _C
    before = getattr(_C, name)(False)
    try:
        yield
    finally:
        getattr(_C, name)(before)


def _switched_off(change: str) -> list:
    """The context managers under which a compile has `change` off."""
    import trident._compat
    import trident.lowering.builtin_lower
    import trident.lowering.cse
    patch = mock.patch.object
    return {
        "mask": [patch(trident.lowering.cse, "eliminate", lambda graph: 0),
                 patch(trident._compat, "_capture_decompositions", lambda: {})],
        "int_adds": [patch(trident.lowering.builtin_lower, "_INT_DTYPES", ())],
        "index_copy": [patch(trident.lowering.builtin_lower, "index_copy", lambda lw, node: False)],
        "clone": [patch(trident.lowering.builtin_lower, "clone", lambda lw, node: False)],
        "mul": [patch(trident.lowering.builtin_lower, "_mul", lambda lw, node: False)],
        "where": [patch(trident.lowering.builtin_lower, "_where", lambda lw, node: False)],
        "convert": [patch(trident.lowering.builtin_lower, "_convert", lambda lw, node: False)],
        "linear_nd": [_native_switch_off("_set_linear_nd")],
        "aten_replay": [_native_switch_off("_set_aten_replay")],
    }[change]


OFF = ("mask", "int_adds", "index_copy", "clone", "mul", "where", "convert", "linear_nd", "aten_replay")


def compiled_without(change: str, step, ids, pos):
    """The step compiled with the change off, and its IR (lowered again under the same patches:
    lower_call captures and lowers anew with whatever trident's modules hold then)."""
    import trident
    off = trident.compile(step, max_specializations=4, graphs=False)
    with contextlib.ExitStack() as stack:
        for cm in _switched_off(change):
            stack.enter_context(cm)
        off(ids, pos)  # the compile happens here
        text = trident.controller(off).lower_call(ids, pos).text
    return off, text


def _ir_summary(text: str) -> str:
    calls = sum(1 for line in text.splitlines() if ' = call "aten::' in line)
    return (f"{text.count(chr(34) + 'aten::where')} where calls, {text.count('scaled_dot_product')} attention "
            f"calls, {calls} ATen calls, {text.count('launch ')} launches, {len(text.splitlines())} lines")


def main():
    import trident
    ap = argparse.ArgumentParser()
    ap.add_argument("--off", choices=OFF, default="mask", help="the change the second variant is compiled without")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--graph", action="store_true",
                    help="also time each variant's step captured in a CUDA graph (device time without launch gaps)")
    opts = ap.parse_args()
    if opts.off == "linear_nd" and os.environ.get("TRIDENT_LINEAR_ND") != "1":
        sys.exit("--off linear_nd compares against the change on: run with TRIDENT_LINEAR_ND=1")
    cfg = hf_llama.FULL if opts.device == "cuda" else hf_llama.TINY
    model = hf_llama.build_model(cfg, opts.device)
    if opts.device == "cuda":
        hf_llama.use_kernels(model, triton=True)
    step = hf_llama.DecodeStep(model, opts.batch, cfg.max_cache)
    ids = torch.zeros((opts.batch, 1), dtype=torch.long, device=opts.device)
    pos = torch.tensor([min(100, cfg.max_cache - 1)], device=opts.device)
    on = trident.compile(step, max_specializations=4, graphs=False)
    off, off_text = compiled_without(opts.off, step, ids, pos)
    want = step(ids, pos)
    names = ("as built", f"{opts.off} off")
    texts = (trident.controller(on).lower_call(ids, pos).text, off_text)
    for name, f, text in zip(names, (on, off), texts):
        if not torch.equal(f(ids, pos), want):
            sys.exit(f"{name}: the step's logits differ from eager's")
        print(f"{name:15s} IR: {_ir_summary(text)}; ATen replay sites {trident.counters(f)['aten_replay_sites']}")
    variants = ((names[0], lambda: on(ids, pos)), (names[1], lambda: off(ids, pos)),
                ("eager", lambda: step(ids, pos)))
    submit = {name: [] for name, _ in variants}
    wall = {name: [] for name, _ in variants[:2]}
    for r in range(opts.rounds):  # each round reverses the order, so neither variant always goes first
        for name, f in variants[::1 if r % 2 == 0 else -1]:
            submit[name].append(submit_us_per_step(f, repeats=30))
    for r in range(max(4, opts.rounds // 2)):
        for name, f in variants[:2][::1 if r % 2 == 0 else -1]:
            wall[name].append(timing.host_us_per_call(f, (), calls=100, repeats=1, warmup=10)[0])
    graph = {}
    if opts.graph:  # each variant's step captured in a CUDA graph: its kernels' device time alone
        for name, f in variants[:2]:
            graph[name] = timing.graph_replay_us(f)[0]
            for _ in range(3):  # the capture moved the step's buffers: its GEMM sites record again now
                f()
    print(f"\nHF step, batch {opts.batch}, {opts.rounds} interleaved rounds: median (min-max) µs per step")
    for name, _ in variants:
        s = submit[name]
        line = f"{name:15s} submit {statistics.median(s):8.1f} ({min(s):.1f}-{max(s):.1f})"
        if name in wall:
            w = wall[name]
            line += f"   wall {statistics.median(w):8.1f} ({min(w):.1f}-{max(w):.1f})"
        if name in graph:
            line += f"   graph {graph[name]:8.1f}"
        print(line)


if __name__ == "__main__":
    main()
