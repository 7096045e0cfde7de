"""The hot path's shortcuts, each checked against eager and exact counters on CPU tensors:
buffers kept from call to call and shared by allocation sites (csrc/runtime/memory/buffer_reuse.h), F.linear of a 2-D
input through mm/addmm with a kept transposed weight view, runs below the Autograd keys when the
call cannot record history, and fresh empty_like results made without the dispatcher."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode

import trident


def aten_calls(fn, *args, name="aten::empty"):
    """How many times `name` is dispatched while fn(*args) runs (the dispatcher's own record)."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn(*args)
    return sum(e.count for e in prof.key_averages() if e.key == name)


def stacked_sum(x, y):
    buf = torch.empty(4, x.shape[1])  # internal: written in place, read, never returned
    buf[:2] = x
    buf[2:] = y
    return buf.sum(0)


def stacked(x, y):
    buf = torch.empty(4, x.shape[1])
    buf[:2] = x
    buf[2:] = y
    return buf


def stacked_tail(x, y):
    buf = torch.empty(4, x.shape[1])
    buf[:2] = x
    buf[2:] = y
    return buf[1:]  # a view: the buffer's storage escapes with it


def pairs(n=3, cols=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(2, cols, generator=g), torch.randn(2, cols, generator=g)) for _ in range(n)]


def test_internal_buffer_is_reused_and_every_call_matches_eager():
    fast = trident.compile(stacked_sum)
    for x, y in pairs():
        torch.testing.assert_close(fast(x, y), stacked_sum(x, y), rtol=0, atol=0)
    c = trident.counters(fast)
    assert (c["reused_buffers"], c["escaped_buffers"], c["reused_bytes"]) == (1, 0, 4 * 8 * 4)
    x, y = pairs(1, seed=5)[0]
    assert aten_calls(fast, x, y) == 0, "a hit allocated the internal buffer again"
    assert aten_calls(stacked_sum, x, y) == 1
    torch.testing.assert_close(fast(x, y), stacked_sum(x, y), rtol=0, atol=0)


class KeepEverything(TorchDispatchMode):
    """Holds every result of every op it sees, as a Python mode may."""

    def __init__(self):
        super().__init__()
        self.kept = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.kept.append(out)
        return out


def test_a_run_under_a_python_dispatch_mode_takes_and_keeps_no_buffer():
    """A dispatch mode's Python code may hold any tensor a run makes (AOTAutograd runs a backend
    graph's first call under one): such a run neither hands out the kept buffer nor keeps its own,
    so no site counts as escaped and reuse goes on once the mode is gone."""
    fast = trident.compile(stacked_sum)
    (x1, y1), (x2, y2), (x3, y3) = pairs()
    torch.testing.assert_close(fast(x1, y1), stacked_sum(x1, y1), rtol=0, atol=0)
    mode = KeepEverything()
    with mode:
        got = fast(x2, y2)
    assert any(isinstance(t, torch.Tensor) and t.shape == (4, 8) for t in mode.kept), "the mode saw no allocation"
    torch.testing.assert_close(got, stacked_sum(x2, y2), rtol=0, atol=0)
    c = trident.counters(fast)
    assert (c["reused_buffers"], c["escaped_buffers"]) == (1, 0)
    torch.testing.assert_close(fast(x3, y3), stacked_sum(x3, y3), rtol=0, atol=0)
    assert aten_calls(fast, x3, y3) == 0, "after the mode's run the kept buffer is not handed out again"


def test_returned_buffer_is_never_handed_out_again():
    fast = trident.compile(stacked)
    (x1, y1), (x2, y2), (x3, y3) = pairs()
    out1 = fast(x1, y1)
    out2 = fast(x2, y2)
    del out2
    out3 = fast(x3, y3)  # out2 is gone: a recycling bug would hand its buffer (or out1's) out here
    torch.testing.assert_close(out1, stacked(x1, y1), rtol=0, atol=0)
    torch.testing.assert_close(out3, stacked(x3, y3), rtol=0, atol=0)
    assert out1.data_ptr() != out3.data_ptr()
    c = trident.counters(fast)
    assert (c["reused_buffers"], c["escaped_buffers"], c["reused_bytes"]) == (0, 1, 0)
    assert aten_calls(fast, x1, y1) == 1


def test_buffer_whose_view_is_returned_is_never_handed_out_again():
    fast = trident.compile(stacked_tail)
    (x1, y1), (x2, y2) = pairs(2)
    out1 = fast(x1, y1)
    out2 = fast(x2, y2)
    torch.testing.assert_close(out1, stacked_tail(x1, y1), rtol=0, atol=0)
    torch.testing.assert_close(out2, stacked_tail(x2, y2), rtol=0, atol=0)
    assert out1.untyped_storage().data_ptr() != out2.untyped_storage().data_ptr()
    assert trident.counters(fast)["escaped_buffers"] == 1


def test_reused_buffer_follows_a_dynamic_size():
    fast = trident.compile(stacked_sum, dynamic=True)
    for cols in (8, 8, 12, 12, 8):
        x, y = pairs(1, cols=cols, seed=cols)[0]
        torch.testing.assert_close(fast(x, y), stacked_sum(x, y), rtol=0, atol=0)
    c = trident.counters(fast)
    assert c["specializations"] == 1 and c["reused_buffers"] == 1 and c["escaped_buffers"] == 0
    assert c["reused_bytes"] == 4 * 8 * 4  # the last call's size


class TwoLinears(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(16, 24)
        self.b = nn.Linear(24, 8, bias=False)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def test_linear_of_a_2d_input_matches_eager_exactly_and_follows_weight_updates():
    model = TwoLinears().eval()
    fast = trident.compile(model)
    x = torch.randn(5, 16)
    with torch.no_grad():
        torch.testing.assert_close(fast(x), model(x), rtol=0, atol=0)
        assert aten_calls(fast, x, name="aten::linear") == 0  # served by addmm / mm
        assert aten_calls(fast, x, name="aten::addmm") == 1 and aten_calls(fast, x, name="aten::mm") == 1
        model.b.weight.mul_(2.0)  # in place: the kept transposed view sees it
        torch.testing.assert_close(fast(x), model(x), rtol=0, atol=0)
        model.b.weight.data = torch.randn(8, 24)  # new storage: the view is rebuilt
        torch.testing.assert_close(fast(x), model(x), rtol=0, atol=0)
        x3 = torch.randn(5, 2, 16).transpose(0, 1)  # a non-contiguous 3-D input keeps ATen's linear;
        torch.testing.assert_close(fast(x3), model(x3), rtol=0, atol=0)  # relu's result is contiguous
        assert aten_calls(fast, x3, name="aten::linear") == 1


@pytest.fixture(params=[True, False], ids=["nd", "flattened"])
def linear_nd(request):
    """Linear sites of modules loaded inside multiply an N-D input without views (on) or flatten it
    as ATen does (off): the runtime's diagnostic switch (aten_typed_gemm.h)."""
    before = trident._C._set_linear_nd(request.param)
    yield request.param
    trident._C._set_linear_nd(before)


def test_linear_of_a_contiguous_nd_input_is_eager_linear_flattened(linear_nd):
    """ATen's linear multiplies a contiguous N-D input flattened to 2-D (mm then _unsafe_view; with a
    bias, 3-D only: addmm then view); trident runs the same product through its mm/addmm path, or
    without a bias and history (linear_nd) into a result of the input's rank: same values, strides
    and view-ness, same gradients, and no aten::linear."""
    torch.manual_seed(1)
    for bias in (False, True):
        layer = nn.Linear(16, 8, bias=bias)
        fast = trident.compile(layer)
        for shape in ((2, 3, 16), (2, 3, 16), (4, 1, 16), (2, 2, 3, 16)):
            x = torch.randn(*shape)
            with torch.no_grad():
                got, want = fast(x), layer(x)
                linears = aten_calls(fast, x, name="aten::linear")
            torch.testing.assert_close(got, want, rtol=0, atol=0)
            assert got.stride() == want.stride() and (got._base is None) == (want._base is None)
            assert linears == (1 if bias and len(shape) == 4 else 0), (bias, shape)  # 4-D with bias: ATen
        grads = []
        for run in (fast, layer):  # recording history: the same graph as eager's, the same gradients
            x = torch.randn(2, 3, 16, generator=torch.Generator().manual_seed(2), requires_grad=True)
            layer.zero_grad()
            out = run(x)
            out.square().sum().backward()
            grads.append((type(out.grad_fn), x.grad, layer.weight.grad.clone()))
        assert grads[0][0] is grads[1][0]
        for g, w in zip(grads[0][1:], grads[1][1:]):
            torch.testing.assert_close(g, w, rtol=0, atol=0)


def test_a_kept_nd_linear_result_is_written_in_place_of_atens_fold(linear_nd):
    """An N-D linear result the function does not return is a kept buffer: with linear_nd its later
    calls write it directly (through 2-D views here on the CPU; cuBLASLt takes the N-D tensors), with
    no _unsafe_view, and give eager's values."""
    layer = nn.Linear(16, 8, bias=False)
    fast = trident.compile(lambda x: torch.relu(layer(x)))
    for shape in ((2, 3, 16), (4, 1, 16), (2, 2, 3, 16)):
        x = torch.randn(*shape)
        with torch.no_grad():
            fast(x)  # compiles the shape; keeps the linear's result
            unsafe_views = aten_calls(fast, x, name="aten::_unsafe_view")
            got, want = fast(x), torch.relu(layer(x))
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        assert unsafe_views == (0 if linear_nd else 1), shape


def test_run_below_autograd_keeps_eager_semantics():
    def f(x, w):
        x.add_(1)
        return torch.relu(x @ w) * 2

    fast = trident.compile(f)
    w = torch.randn(4, 5)
    for _ in range(2):  # grad mode on, nothing requires grad: outputs carry no history
        a, b = torch.zeros(3, 4), torch.zeros(3, 4)
        va, vb = a._version, b._version
        out, ref = fast(a, w), f(b, w)
        torch.testing.assert_close(out, ref, rtol=0, atol=0)
        assert not out.requires_grad and out.grad_fn is None
        assert a._version - va == b._version - vb  # the in-place write still bumps the version
    wg = torch.randn(4, 5, requires_grad=True)  # a tensor that requires grad: history recorded
    out = fast(torch.zeros(3, 4), wg)
    assert out.requires_grad and out.grad_fn is not None
    out.sum().backward()
    ref_w = wg.detach().clone().requires_grad_(True)
    f(torch.zeros(3, 4), ref_w).sum().backward()
    torch.testing.assert_close(wg.grad, ref_w.grad)


def chain(a, b, w):
    h = a + b
    g = h * a
    return torch.mm(g, w).sum(1)


def chain_out(a, b, w):
    h = a + b
    return h, torch.mm(h * a, w)


def test_out_variants_write_reused_buffers_and_match_eager():
    fast = trident.compile(chain)
    g = torch.Generator().manual_seed(3)
    for _ in range(3):
        a, b, w = torch.randn(6, 5, generator=g), torch.randn(6, 5, generator=g), torch.randn(5, 7, generator=g)
        torch.testing.assert_close(fast(a, b, w), chain(a, b, w), rtol=0, atol=0)
    c = trident.counters(fast)
    assert (c["reused_buffers"], c["escaped_buffers"]) == (3, 0)  # add, mul, mm
    assert c["reused_bytes"] == (6 * 5 * 2 + 6 * 7) * 4


def test_out_variant_results_that_are_returned_are_fresh_every_call():
    fast = trident.compile(chain_out)
    g = torch.Generator().manual_seed(4)
    args = [tuple(torch.randn(s, generator=g) for s in ((6, 5), (6, 5), (5, 7))) for _ in range(3)]
    outs = [fast(*a) for a in args]
    for a, out in zip(args, outs):  # earlier results were not overwritten by later calls
        torch.testing.assert_close(out, chain_out(*a), rtol=0, atol=0)
    assert outs[0][1].data_ptr() != outs[2][1].data_ptr()
    c = trident.counters(fast)
    assert (c["reused_buffers"], c["escaped_buffers"]) == (1, 2)  # mul is internal; add, mm returned


def layers(x, a):
    for _ in range(4):
        x = (x + a) * a  # each layer's two intermediates die before the next layer's are made
    return x.sum(0)


def test_sites_whose_buffers_never_live_at_once_share_them():
    """Eight out= sites, at most two of their results alive at once: the pool keeps two buffers,
    as eager's allocator would have two blocks in use, not one per site."""
    fast = trident.compile(layers)
    g = torch.Generator().manual_seed(5)
    for _ in range(3):
        x, a = torch.randn(6, 5, generator=g), torch.randn(6, 5, generator=g)
        torch.testing.assert_close(fast(x, a), layers(x, a), rtol=0, atol=0)
    c = trident.counters(fast)
    assert (c["reused_buffers"], c["escaped_buffers"], c["reused_bytes"]) == (2, 0, 2 * 6 * 5 * 4)


def test_shared_buffers_follow_a_dynamic_size():
    fast = trident.compile(layers, dynamic=True)
    g = torch.Generator().manual_seed(6)
    for cols in (5, 5, 9, 9, 3):
        x, a = torch.randn(6, cols, generator=g), torch.randn(6, cols, generator=g)
        torch.testing.assert_close(fast(x, a), layers(x, a), rtol=0, atol=0)
    c = trident.counters(fast)
    assert c["specializations"] == 1
    assert (c["reused_buffers"], c["escaped_buffers"], c["reused_bytes"]) == (2, 0, 2 * 6 * 3 * 4)


def layers_out(x, a):
    for _ in range(4):
        x = (x + a) * a
    return x  # the last mul's result leaves the call


def test_a_returned_result_leaves_the_shared_pool():
    """The last mul takes a buffer earlier muls shared; it is returned, so it leaves the pool and
    that site allocates from then on; the other seven sites still share two buffers."""
    fast = trident.compile(layers_out)
    g = torch.Generator().manual_seed(7)
    args = [(torch.randn(6, 5, generator=g), torch.randn(6, 5, generator=g)) for _ in range(4)]
    outs = [fast(x, a) for x, a in args]
    for (x, a), out in zip(args, outs):  # no later call wrote into an earlier result
        torch.testing.assert_close(out, layers_out(x, a), rtol=0, atol=0)
    assert len({o.data_ptr() for o in outs}) == len(outs)
    c = trident.counters(fast)
    assert (c["reused_buffers"], c["escaped_buffers"], c["reused_bytes"]) == (2, 1, 2 * 6 * 5 * 4)


def two_dtypes(x):
    a = torch.empty(4, x.shape[1])
    a[:2] = x
    a[2:] = x
    s = a.sum(0)
    b = torch.empty(4, x.shape[1], dtype=torch.float64)  # a's sizes, a's buffer free: another dtype
    b[:2] = x
    b[2:] = x
    return s, b.sum(0)


def test_sites_that_make_other_dtypes_never_share_a_buffer():
    fast = trident.compile(two_dtypes)
    for x, _ in pairs():
        got, want = fast(x), two_dtypes(x)
        assert [t.dtype for t in got] == [torch.float32, torch.float64]
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=0, atol=0)
    c = trident.counters(fast)
    assert (c["reused_buffers"], c["escaped_buffers"], c["reused_bytes"]) == (2, 0, 4 * 8 * 4 + 4 * 8 * 8)


def test_deterministic_fill_of_new_memory_turns_reuse_off():
    fast = trident.compile(stacked_sum)
    x, y = pairs(1)[0]
    fast(x, y)
    torch.use_deterministic_algorithms(True)
    try:
        fast(x, y)  # deterministic mode is a setting of its own specialization: compiled here
        assert aten_calls(fast, x, y) == 1  # allocates (and fills) every call, as eager does
        torch.testing.assert_close(fast(x, y), stacked_sum(x, y), rtol=0, atol=0)
    finally:
        torch.use_deterministic_algorithms(False)
    fast(x, y)  # refills the pool (the deterministic specialization's runs kept nothing)
    assert aten_calls(fast, x, y) == 0


def doubled_like(x):
    out = torch.empty_like(x)  # returned: a fresh tensor every call
    out.copy_(x * 2)
    return out


def doubled_like_f64(x):
    out = torch.empty_like(x, dtype=torch.float64)
    out.copy_(x * 2)
    return out


def test_empty_like_of_a_dense_template_skips_the_dispatcher_and_matches_eager():
    """A returned empty_like result is allocated every call; for a dense, non-overlapping template
    that is ATen's empty_strided with the template's strides, made without dispatching empty_like.
    Strides, dtype and values are eager's; other templates take the dispatcher."""
    g = torch.Generator().manual_seed(0)
    base = torch.randn(6, 4, 5, 3, generator=g)
    templates = {"contiguous": lambda: base[0].clone(), "transposed": lambda: base[0].clone().transpose(0, 2),
                 "channels_last": lambda: base.clone(memory_format=torch.channels_last),
                 "strided slice": lambda: base[0].clone()[:, ::2]}
    for fn in (doubled_like, doubled_like_f64):
        for name, make in templates.items():
            x = make()
            fast = trident.compile(fn)
            for _ in range(2):  # a compile, then a hit
                got, want = fast(x), fn(x)
                torch.testing.assert_close(got, want, rtol=0, atol=0)
                assert (got.stride(), got.dtype) == (want.stride(), want.dtype), (fn.__name__, name)
            dense = x.is_contiguous() or x.is_contiguous(memory_format=torch.channels_last) or name == "transposed"
            assert aten_calls(fast, x, name="aten::empty_like") == (0 if dense else 1), (fn.__name__, name)
            assert aten_calls(fn, x, name="aten::empty_like") == 1
            torch.use_deterministic_algorithms(True)  # the fill needs ATen's own empty_like
            try:
                fast(x)  # a specialization of its own (the setting is guarded): compiled here
                assert aten_calls(fast, x, name="aten::empty_like") == 1
                torch.testing.assert_close(fast(x), fn(x), rtol=0, atol=0)
            finally:
                torch.use_deterministic_algorithms(False)


KEPT_BYTES_CHECK = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    import torch, trident
    from test_hot_path_reuse import aten_calls, pairs, stacked_sum
    fast = trident.compile(stacked_sum)
    for x, y in pairs():
        torch.testing.assert_close(fast(x, y), stacked_sum(x, y), rtol=0, atol=0)
    c = trident.counters(fast)
    print(c["reused_buffers"], c["reused_bytes"], aten_calls(fast, *pairs(1, seed=5)[0]))
""")


@pytest.mark.parametrize("kept_bytes, expected", [("", "1 128 0"), ("128", "1 128 0"), ("127", "0 0 1"),
                                                  ("0", "0 0 1")])
def test_kept_bytes_caps_what_a_module_keeps(kept_bytes, expected):
    """TRIDENT_KEPT_BYTES (read once per process) caps the bytes a module keeps between calls; under
    the one 4x8 fp32 buffer's 128 bytes, or 0, the site allocates on every call as eager does."""
    code = KEPT_BYTES_CHECK.format(tests=os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "TRIDENT_KEPT_BYTES": kept_bytes}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split("\n")[-2] == expected


def test_malformed_kept_bytes_fails_at_import():
    env = {**os.environ, "TRIDENT_KEPT_BYTES": "64MiB"}
    r = subprocess.run([sys.executable, "-c", "import trident"], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode != 0
    assert "TRIDENT_KEPT_BYTES must be a number of bytes (0 or more), got '64MiB'" in r.stderr


def test_buffers_made_under_inference_mode_serve_only_runs_under_it():
    """An inference tensor cannot be written outside torch.inference_mode: a no_grad call after an
    inference_mode call used to fail ("Inplace update to inference tensor outside InferenceMode")."""
    lin1, lin2 = torch.nn.Linear(8, 8), torch.nn.Linear(8, 2)

    def mlp(x):
        return lin2(lin1(x).relu())

    fast = trident.compile(mlp)
    x = torch.randn(4, 8)
    for mode in ("inference", "no_grad", "inference", "no_grad", "no_grad"):
        with torch.inference_mode() if mode == "inference" else torch.no_grad():
            got, want = fast(x), mlp(x)
        assert torch.equal(got, want) and got.is_inference() == want.is_inference(), mode
    assert trident.counters(fast)["reused_buffers"] >= 1
