"""Every knob of torch-trident, defined once with its meaning (environment variables are read here,
once, at import). Per-function options are the keyword arguments of trident.compile."""
from __future__ import annotations

import os
from dataclasses import dataclass

# Where compiled modules and cubins are cached (read by the native toolchain too): TRIDENT_CACHE_DIR.
# The C compiler for generated modules: TRIDENT_CC, else CC, else `cc`.
# TRIDENT_TRITON_TARGET ("cuda:90"): compile Triton kernels for this target instead of the active
#   GPU's; lets machines without a GPU capture and compile (tests, ahead-of-time builds).
# TRIDENT_BUILTIN_KERNELS: "auto" (default: same-dtype copies and same-shape adds of CUDA tensors run
#   trident's own Triton kernels, builtin_lower.py), "off", or "all" (any device; CPU tests).
# TRIDENT_CUBLASLT_REPLAY: "0" turns off the replay of recorded cuBLASLt launches at GEMM sites whose
#   pointers repeat (csrc/runtime/gemm/lt_gemm.h); read once, by the native runtime, at its first GEMM.
# TRIDENT_ATEN_REPLAY: "0" turns off the replay of recorded launches at ATen call sites (cuDNN
#   attention without dropout) whose inputs repeat (csrc/runtime/replay/op_replay.h); read once, by the
#   native runtime, when a module is loaded.
# TRIDENT_LINEAR_ND: "1" makes F.linear of a contiguous N-D input without a bias on CUDA multiply it as
#   it is into a [..., N] result, without ATen's flattening view and _unsafe_view (csrc/runtime/
#   aten_typed_gemm.h; off by default: on the HF Llama its kernels took the same device time, but each
#   step's wall time was 11-18 µs longer, in the gaps between launches, and its host saving did not
#   repeat in every run: benchmarks/NOTES.md, sessions 15-16); read once, by the native runtime, when
#   its first module is loaded.
# TRIDENT_ARTIFACTS: "0" stops compiled functions from keeping their specializations in the cache
#   directory and installing another process's from there (artifacts.py); trident.save/load still work.
# TRIDENT_KEPT_BYTES: how many bytes of intermediate buffers one compiled module may keep from one
#   call to the next (csrc/runtime/memory/buffer_reuse.h; default 268435456, 256 MiB); "0" keeps none, so
#   every allocation site allocates on every call, as eager does: less memory held between and
#   during calls for one allocator round trip per site per call, and GEMM sites whose output lands
#   at a new address no longer replay cuBLASLt's launches (the HF Llama at batch 1: 26% fewer
#   tokens/s, benchmarks/NOTES.md session 9). Read once, by the native runtime; kept_bytes()
#   rejects a malformed value at import.
# TRIDENT_GRAPHS: "1" (default) makes graph mode (Options.graphs) the default of trident.compile and
#   of the backend's options, "0" turns it off; an explicit graphs= wins. Read once, at import.
# TRIDENT_GRAPH_DIRECT_RESULTS: "1" (default) lets a CUDA graph's kernels write a result that only
#   Triton launches touch straight into the tensor a replay returns, instead of into the graph's own
#   memory and then through a copy node (csrc/runtime/graphs/direct_results.h): one graph node fewer
#   per such result; "0" turns it off. Read by the native runtime as each specialization loads.
# TRIDENT_GRAPH_SEGMENTS: "1" (default) splits the CUDA graphs of a program that reads a device value on
#   the host (an .item(): a size, a tile count) into segments at each read; a replay launches them in
#   turn, reading the value between two, and goes on as a plain run from a read whose value differs
#   from the one its graph was captured with (csrc/runtime/graphs/spec_graphs.h, Segments). "0" turns
#   it off: such a program then runs without graphs. Read by the native runtime as each
#   specialization loads.
# TRIDENT_GRAPH_BYTES: the most memory one CUDA graph's private pool may hold (default 1073741824,
#   1 GiB); a specialization whose graph would hold more runs without graphs, said in explain
#   (csrc/runtime/graphs/spec_graphs.h, Memory). Read once, by the native runtime; graph_bytes()
#   rejects a malformed value at import.

ON_MISS_POLICIES = ("compile", "error", "eager")


def _graphs_default() -> bool:
    raw = os.environ.get("TRIDENT_GRAPHS", "1")
    if raw not in ("0", "1"):
        raise ValueError(f"TRIDENT_GRAPHS must be 0 or 1, got {raw!r}")
    return raw == "1"


GRAPHS_DEFAULT = _graphs_default()


@dataclass(frozen=True)
class Options:
    """Options of one compiled function.

    max_specializations: how many specializations one function may hold; a miss beyond it follows
        `on_miss` as if it were "eager" (or "error" when on_miss="error"), logged once.
    on_miss: "compile" (capture and add a specialization), "error" (raise MissPolicyError naming the
        failed guard), or "eager" (run the original function, counted as a fallback). Under "error"
        and "eager", `trident.warmup(fast, *args)` compiles the specializations a deployment expects
        (a warm-up call compiles whatever the policy), so later misses are errors or eager calls.
    dynamic: None (automatic: a tensor size or Python int seen with two values becomes symbolic, as
        torch.compile's automatic dynamic does; a Python float is a run-time value from the first
        call unless it decides a branch, when each value is a specialization, said once), True
        (symbolic from the first call wherever the trace allows), False (every size, int and float
        is a guard: one specialization per signature). Floats inside lists, dicts or objects are
        always guarded by value.
    reuse_outputs: False (default: every call returns tensors in fresh memory from the caching
        allocator, as eager does), or True: a returned tensor (up to 16 MiB) stays with the function
        and a later call returns it again, the same tensor object, once the caller holds no tensor
        over it, on the stream it was last used on; no allocation, free or new Python object per
        returned tensor (benchmarks/NOTES.md, sessions 17-18). Nothing the caller did to a dropped
        result carries over (attributes, weakrefs or autograd state: its memory goes out under a new
        object; reshaped or resized: let go). The contract: record_stream does not reach that
        memory, so a returned tensor used on another stream must stay referenced until that stream
        is done with it, and a result's _version continues from its last use
        (csrc/runtime/memory/buffer_reuse.h).
    graphs: True (default; TRIDENT_GRAPHS=0 makes it False) or False: on CUDA, a specialization
        called a third time with the same arguments (tensors by sizes, strides and address
        alignment; the same ints and floats) is captured as one CUDA graph, and each later such call
        replays it with one graph launch after the native guards, instead of launching its kernels
        one by one (csrc/runtime/graphs/spec_graphs.h). Tensors at new addresses (a new KV cache, new
        token ids) are pointed at by the graph's nodes before the launch, or, for a small tensor
        the program only reads that many nodes hold, copied into the graph's own buffer; in-place
        writes (a KV cache) land in the caller's tensors. A replay returns its results as a call
        without graphs does (fresh tensors, or with reuse_outputs=True ones the caller dropped). The
        graph's intermediates stay allocated while it lives (in a private pool, as
        torch.cuda.graph's; at most TRIDENT_GRAPH_BYTES, 1 GiB, per graph), at most 4 graphs per
        specialization. A specialization whose program cannot be captured (it computes on the CPU,
        synchronizes with the host, calls a collective, or returns memory an argument shares) runs
        as without graphs; trident.explain says why.
    fullgraph: False (default): a call that cannot be captured as one program (a call into an opaque
        extension, a construct the lowering cannot take) runs split where torch.compile splits it,
        each piece native, Python between them, said once (graph_breaks.py); True: such a call
        raises UnsupportedError naming the user's line, as torch.compile(fullgraph=True) does.
    """
    max_specializations: int = int(os.environ.get("TRIDENT_MAX_SPECIALIZATIONS", "64"))
    on_miss: str = "compile"
    dynamic: bool | None = None
    reuse_outputs: bool = False
    graphs: bool = GRAPHS_DEFAULT
    fullgraph: bool = False

    def __post_init__(self):
        if self.on_miss not in ON_MISS_POLICIES:
            raise ValueError(f"on_miss must be one of {ON_MISS_POLICIES}, got {self.on_miss!r}")
        if self.dynamic not in (None, True, False):
            raise ValueError(f"dynamic must be None, True or False, got {self.dynamic!r}")
        if type(self.reuse_outputs) is not bool:
            raise ValueError(f"reuse_outputs must be True or False, got {self.reuse_outputs!r}")
        if type(self.graphs) is not bool:
            raise ValueError(f"graphs must be True or False, got {self.graphs!r}")
        if type(self.fullgraph) is not bool:
            raise ValueError(f"fullgraph must be True or False, got {self.fullgraph!r}")
        if type(self.max_specializations) is not int or self.max_specializations < 1:  # not a bool
            raise ValueError(f"max_specializations must be a positive int, got {self.max_specializations!r}")


def cache_dir() -> str:
    """The cache directory the native toolchain uses (one definition, in C++)."""
    from . import _C
    return _C.cache_dir()


BUILTIN_KERNEL_MODES = ("auto", "off", "all")


def builtin_kernels() -> str:
    """TRIDENT_BUILTIN_KERNELS, read at each lowering (tests switch it)."""
    mode = os.environ.get("TRIDENT_BUILTIN_KERNELS", "auto")
    if mode not in BUILTIN_KERNEL_MODES:
        raise ValueError(f"TRIDENT_BUILTIN_KERNELS must be one of {BUILTIN_KERNEL_MODES}, got {mode!r}")
    return mode


def triton_target():
    """The GPUTarget Triton kernels are compiled for: TRIDENT_TRITON_TARGET, else the active GPU."""
    spec = os.environ.get("TRIDENT_TRITON_TARGET")
    from triton.backends.compiler import GPUTarget
    if spec:
        backend, _, arch = spec.partition(":")
        return GPUTarget(backend, int(arch), 32)
    import triton
    return triton.runtime.driver.active.get_current_target()


DEFAULT_KEPT_BYTES = 256 << 20


DEFAULT_GRAPH_BYTES = 1 << 30


def _env_bytes(name: str, default: int) -> int:
    """A byte count as the native runtime reads it (env_switch.h: env_bytes): a decimal count of
    bytes, 0 or more; `default` when unset or empty."""
    raw = os.environ.get(name, "")
    if raw == "":
        return default
    if not raw.isdigit():
        raise ValueError(f"{name} must be a number of bytes (0 or more), got {raw!r}")
    return int(raw)


def graph_bytes() -> int:
    """TRIDENT_GRAPH_BYTES as the native runtime reads it."""
    return _env_bytes("TRIDENT_GRAPH_BYTES", DEFAULT_GRAPH_BYTES)


def kept_bytes() -> int:
    """TRIDENT_KEPT_BYTES as the native runtime reads it."""
    return _env_bytes("TRIDENT_KEPT_BYTES", DEFAULT_KEPT_BYTES)
