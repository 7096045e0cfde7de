"""Views that only kernels read are passed as pointers (lazy_views.py), on the GPU machine
(pytest -m gpu): results equal eager's bit for bit at static and position-dependent offsets, and the
view calls are gone from the host program unless an ATen op needs the tensor."""
import pytest
import torch
import triton

import trident
from tutorial_kernels import _layer_norm_fwd_fused

pytestmark = pytest.mark.gpu
N = 1001  # 4004-byte rows: a row offset is 16-byte aligned only at multiples of 4


def require_cuda():
    if not torch.cuda.is_available():
        pytest.fail("GPU test run without a CUDA device")


def norm_rows(x, w, b, pos: int, also_sum: bool):
    rows = x[pos:pos + 4]  # a view at pos * 4004 bytes into x
    y = torch.empty((4, N), dtype=x.dtype, device=x.device)  # (empty_like(rows) would need the view)
    mean = torch.empty((4,), dtype=torch.float32, device=x.device)
    rstd = torch.empty((4,), dtype=torch.float32, device=x.device)
    _layer_norm_fwd_fused[(4,)](rows, y, w, b, mean, rstd, rows.stride(0), N, 1e-5, BLOCK_SIZE=1024)
    if also_sum:  # an ATen op reads the view too: then it is a tensor, made after the launch
        return y, mean, rstd, rows.sum(0)
    return y, mean, rstd


@pytest.mark.parametrize("also_sum", [False, True])
def test_kernel_reading_a_view_at_static_and_symbolic_offsets_matches_eager(also_sum):
    require_cuda()
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(64, N, device="cuda", generator=g)
    w, b = torch.randn(N, device="cuda", generator=g), torch.randn(N, device="cuda", generator=g)
    fast = trident.compile(norm_rows)
    for pos in (3, 4, 5, 10, 11, 60):  # 3 is traced static (unaligned), 4 makes pos symbolic
        got, want = fast(x, w, b, pos, also_sum), norm_rows(x, w, b, pos, also_sum)
        assert all(torch.equal(a, e) for a, e in zip(got, want)), pos
    last = trident.explain(fast, x, w, b, 12, also_sum)
    body = last[last.rindex("structure"):]
    assert "ptr(%0, $" in body, body
    assert ('call "aten::slice.Tensor"' in body) == also_sum, body
