"""A stand-in for Triton's active CUDA driver, so kernels can be specialized, compiled for sm_90 and
captured by Dynamo on a machine without a GPU: Triton asks its active driver for the current
target, device and stream when it specializes and compiles, and nothing else of it."""
import contextlib

import torch
import triton
from triton.backends.compiler import GPUTarget


class FakeCudaDriver:
    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        return GPUTarget("cuda", 90, 32)

    def get_active_torch_device(self):
        return torch.device("cpu")


@contextlib.contextmanager
def capture_as_sm90(monkeypatch):
    """Dynamo captures user Triton kernels and trident compiles them for sm_90 with no GPU
    (torch's `has_triton()` check stands in for a GPU there); the previous active driver comes back
    afterwards (resetting it would build the real one, which raises without a GPU)."""
    import torch.utils._triton as tu
    monkeypatch.setattr(tu, "has_triton", lambda: True)
    monkeypatch.setenv("TRIDENT_TRITON_TARGET", "cuda:90")
    saved = triton.runtime.driver._active
    triton.runtime.driver.set_active(FakeCudaDriver())
    try:
        yield
    finally:
        triton.runtime.driver._active = saved


def keep_ptx(monkeypatch) -> dict:
    """{kernel name: PTX} of every kernel triton.compile builds from now on (compiled for sm_90 under
    capture_as_sm90): how CPU tests read what the device would run. trident's own record of the
    kernels this process compiled starts empty, so that each kernel goes through triton.compile."""
    from trident.lowering import triton_specialize
    ptx = {}
    compile_ = triton.compile
    monkeypatch.setattr(triton_specialize, "_COMPILED", {})
    monkeypatch.setattr(triton_specialize, "_SPECIALIZED", {})

    def keeping_ptx(src, target=None, options=None):
        ck = compile_(src, target=target, options=options)
        ptx[ck.metadata.name] = ck.asm["ptx"]
        return ck
    monkeypatch.setattr(triton, "compile", keeping_ptx)
    return ptx
