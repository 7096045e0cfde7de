"""Views that only kernels read become `ptr(%base, offset)` launch operands (lazy_views.py), checked
in the host IR without a GPU (kernels compiled for sm_90, the driver faked); the GPU file
test_lazy_views_gpu.py runs the same function against eager."""
import re

import pytest
import torch
from fake_cuda import capture_as_sm90

import trident
from test_lazy_views_gpu import N, norm_rows


@pytest.fixture(autouse=True)
def sm90(monkeypatch):
    with capture_as_sm90(monkeypatch):
        yield


def body(fn, *args):
    return trident.controller(trident.compile(fn)).lower_call(*args).text.split("%0 = arg 0", 1)[1]


@pytest.mark.parametrize("also_sum", [False, True])
def test_a_view_read_by_a_kernel_is_a_pointer_and_a_tensor_only_where_aten_reads_it(also_sum):
    x, w, b = torch.randn(64, N), torch.randn(N), torch.randn(N)
    text = body(norm_rows, x, w, b, 3, also_sum)
    # rows 3..6 of x: 3 * 1001 * 4 bytes in
    assert re.search(r"launch 0 grid\(4, 1, 1\) \(ptr\(%0, 12012\), %\d+, %1, %2,", text), text
    slices = re.findall(r'call "aten::slice.Tensor" \(%0, 0, 3, 7, 1\)', text)
    assert len(slices) == int(also_sum), text
    if also_sum:  # made once, after the launch, for the op that needs it
        assert text.index("launch 0") < text.index("aten::slice.Tensor") < text.index("aten::sum")
