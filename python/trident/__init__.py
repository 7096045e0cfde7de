"""torch-trident: native Specialization Cache Modules for PyTorch programs.

    fast = trident.compile(model)   # first call captures and compiles; later calls stay native
    trident.counters(fast)          # {"hits", "misses", "compiles", "specializations", "fallbacks", ...}
    print(trident.explain(fast))    # specializations, guards, generated source, counters
"""
from __future__ import annotations

import os

import torch  # noqa: F401  (loads libtorch before the extension)

try:
    from ._build_info import TORCH_VERSION as _BUILT_TORCH
except ImportError:  # a source tree never built: importing _C below says so
    _BUILT_TORCH = None
if _BUILT_TORCH is not None and _BUILT_TORCH != torch.__version__:
    raise ImportError(f"trident's extension was built against torch {_BUILT_TORCH}, but torch {torch.__version__} "
                      "is installed: rebuild it against this torch with `pip install --no-build-isolation .` "
                      "(`-e .` for a checkout)")

from . import _C, _compat, _state  # noqa: E402
from .compiled import CompiledFunction
from .config import Options, graph_bytes as _graph_bytes, kept_bytes as _kept_bytes
from .errors import MissPolicyError, TridentError, UnsupportedError
from .explain import explain

__all__ = ["compile", "warmup", "counters", "explain", "save", "load", "TridentError", "UnsupportedError",
           "MissPolicyError", "Options"]
__version__ = "0.1.0"

_kept_bytes()  # a malformed TRIDENT_KEPT_BYTES fails at import, not silently in the native runtime
_graph_bytes()  # and TRIDENT_GRAPH_BYTES

_recording_pools = _compat.private_pool_api()  # for the ATen calls that replay (csrc/runtime/replay/op_replay.h)
if _recording_pools is not None:
    _C.set_private_pool_api(_recording_pools.begin, _recording_pools.end, _recording_pools.release,
                            _recording_pools.segments)

_state.install_hooks()


def compile(fn=None, *, max_specializations: int | None = None, on_miss: str = "compile",
            dynamic: bool | None = None, reuse_outputs: bool = False, graphs: bool | None = None,
            fullgraph: bool = False):
    """Compile `fn` (a function or nn.Module) into a native callable.

    The result is called exactly like `fn`. Each new argument signature (structure, dtypes, devices,
    shapes, strides, Python scalar values, grad mode) is captured once with torch.export and added to
    the function's Specialization Cache Module; every later matching call runs in native code.
    Sizes and ints that vary become symbolic (see trident.Options for `dynamic`, `on_miss`,
    `max_specializations`, `reuse_outputs`, `graphs` and `fullgraph`). A call that cannot be captured
    as one program runs split at its graph breaks, each piece native (fullgraph=True raises
    instead). Usable as a decorator, with or without arguments."""
    kw = {"on_miss": on_miss, "dynamic": dynamic, "reuse_outputs": reuse_outputs, "fullgraph": fullgraph}
    if max_specializations is not None:
        kw["max_specializations"] = max_specializations
    if graphs is not None:  # None: Options' default (TRIDENT_GRAPHS)
        kw["graphs"] = graphs
    options = Options(**kw)
    if fn is None:
        return lambda f: compile(f, max_specializations=max_specializations, on_miss=on_miss, dynamic=dynamic,
                                 reuse_outputs=reuse_outputs, graphs=graphs, fullgraph=fullgraph)
    if not callable(fn):
        raise TypeError(f"trident.compile expects a function or nn.Module, got {type(fn).__name__}")
    from .transformers_generate import install_for
    install_for(fn)  # a transformers model's forward: its generate() skips its own torch.compile
    return CompiledFunction(fn, options).detach()


def save(compiled, path) -> None:
    """Write the specializations `compiled` holds to `path`, for trident.load in another process
    (artifacts.py says what is kept and how it is checked). Raises ValueError when there is nothing
    a file can hold (no specialization yet, or a program that names an object no file can)."""
    from . import artifacts
    try:
        data = artifacts.build(controller(compiled))
    except artifacts.ArtifactRejected as e:
        raise ValueError(f"trident.save: {e}") from None
    artifacts.write(data, os.fspath(path))


def load(path, fn, **options):
    """trident.compile(fn, **options) with the specializations saved at `path` (trident.save)
    installed, without capturing them. A file that does not fit (another version of the code,
    the state, torch, Triton or the GPU; truncated or altered; missing) is said once and the
    function captures as compile's would: counters' artifacts_rejected says so."""
    from . import artifacts
    fast = compile(fn, **options)
    ctl = controller(fast)
    with ctl.lock:
        try:
            header, blobs = artifacts.read(os.fspath(path))
            ctl.install_saved(header, blobs, os.fspath(path))
        except artifacts.ArtifactRejected as e:
            ctl._reject_artifact(os.fspath(path), e)
    return fast


def warmup(compiled, *args, **kwargs):
    """Call `compiled` with these arguments, compiling a specialization for them if none matches,
    whatever its `on_miss` policy: how a function compiled with on_miss="error" or "eager" gets the
    specializations it is meant to serve. Returns the call's result."""
    return controller(compiled).warm(args, kwargs)


def controller(compiled) -> CompiledFunction:
    """The controller behind a callable returned by trident.compile (TypeError otherwise)."""
    owner = getattr(getattr(compiled, "on_miss", None), "__self__", None)
    if not isinstance(compiled, _C.SCM) or not isinstance(owner, CompiledFunction):
        raise TypeError(f"expected a function returned by trident.compile, got {type(compiled).__name__}")
    return owner


def counters(compiled) -> dict:
    """Integer counters of a compiled function: hits, misses, compiles, specializations, fallbacks,
    module_cache_loads (modules reused from the disk cache), compile_seconds (float), and the
    buffers the module keeps for its allocation sites (shared by sites whose results are not alive at
    once): reused_buffers (buffers kept now), escaped_buffers (sites that stopped reusing because a
    result kept their buffer), reused_bytes, recycled_outputs (requests served by the memory of a
    result the caller has dropped: reuse_outputs=True only);
    and the fp16/bf16 CUDA GEMM sites (mm, linear) that call cuBLASLt directly: cublaslt_gemms (after
    their first result matched at::mm bit for bit), cublaslt_declined (sites that went back to ATen),
    cublaslt_replayed (sites issuing their recorded cuBLASLt launches without cuBLASLt: same pointers as
    the call before, first replay bit for bit equal; TRIDENT_CUBLASLT_REPLAY=0 turns it off);
    and the ATen calls that may replay their recorded launches (cuDNN attention without dropout):
    aten_replay_sites, aten_replayed (sites doing so now: same inputs as the call before, first
    replay bit for bit equal, results not held elsewhere; TRIDENT_ATEN_REPLAY=0 turns it off);
    and with graphs=True: graphs (CUDA graphs held now), graph_captures, graph_replays (calls served
    by one graph launch), graph_rebinds (replays that first rewrote a graph for new argument
    addresses, such as a new KV cache), graph_patches (replays that pointed a graph at a small
    read-only argument where the caller has it, instead of copying it into the graph's buffer),
    graph_scalar_patches (replays that first rewrote a graph's Triton launch nodes for new int, bool
    or float arguments, such as a decode position), graph_patched_nodes (the nodes they rewrote) and
    graph_result_nodes (nodes pointed at a replay's fresh result tensor, where the graph's kernels
    write a result directly; TRIDENT_GRAPH_DIRECT_RESULTS=0 turns that off), graph_segments (host reads at which the
    graphs held now are split) and graph_read_misses (calls whose host read
    gave another value than their graph was captured with, which went on without it from there). Where a miss's time went, summed over
    misses: capture_seconds
    (torch.export), lowering_seconds (to host IR, Triton compiles included: triton_compile_seconds
    is the part spent in triton.compile), compile_seconds (the C
    compiler) and load_seconds (loading and resolving objects); spec_objects counts the objects
    built or loaded from the cache, one per specialization added (the others are reused). A miss
    does not wait for its decision program's compile: background_compile_seconds is the part of
    compile_seconds spent after the miss returned, while calls selected their specialization by
    interpreted guards (interpreted_selects counts those calls). counters() first waits for a
    decision program still compiling, so the figures are final."""
    c = controller(compiled)
    split = c._split_route.counters() if c._split_route is not None else \
        {"split_calls": 0, "split_pieces": 0, "split_piece_hits": 0, "split_piece_fallbacks": 0}
    return {**c.scm.counters(), "capture_seconds": c.capture_seconds, "lowering_seconds": c.lowering_seconds,
            "triton_compile_seconds": c.triton_compile_seconds,
            "captures": c.captures, "artifact_loads": c.artifact_loads, "artifacts_rejected": c.artifacts_rejected,
            **split}
