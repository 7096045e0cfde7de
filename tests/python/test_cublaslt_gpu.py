"""fp16/bf16 GEMMs of mm and F.linear sites through cuBLASLt (csrc/runtime/gemm/lt_gemm.h), on the GPU
machine (pytest -m gpu). Each result must equal eager's bit for bit; the counters say which sites
took the cuBLASLt path and which handed back to ATen."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import trident

pytestmark = pytest.mark.gpu


def require_cuda():
    if not torch.cuda.is_available():
        pytest.fail("GPU test run without a CUDA device")


class Mlp(nn.Module):
    """The decode step's GEMM shapes: qkv, o, gate+up and down projections of an 8-layer d=2048 model."""

    def __init__(self, dtype):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.ws = nn.ParameterList(
            nn.Parameter((torch.randn(n, k, generator=g) / k ** 0.5).to("cuda", dtype), requires_grad=False)
            for n, k in ((6144, 2048), (2048, 2048), (11264, 2048), (2048, 5632)))

    def forward(self, x):
        q = F.linear(x, self.ws[0])
        o = F.linear(q[:, :2048].contiguous(), self.ws[1])
        gu = F.linear(o, self.ws[2])
        return F.linear(gu[:, :5632].contiguous() * gu[:, 5632:], self.ws[3])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("batch", [1, 8])
def test_decode_shapes_match_eager_bit_for_bit(dtype, batch):
    require_cuda()
    model = Mlp(dtype)
    fast = trident.compile(model)
    with torch.no_grad():
        for seed in range(3):
            x = torch.randn(batch, 2048, generator=torch.Generator().manual_seed(seed)).to("cuda", dtype)
            assert torch.equal(fast(x), model(x))
    c = trident.counters(fast)
    assert (c["cublaslt_gemms"], c["cublaslt_declined"]) == (4, 0), c


def test_mm_of_two_arguments_and_fresh_outputs():
    require_cuda()

    def f(a, w):
        return a @ w.t(), torch.mm(a, w.t()) * 2  # both returned: fresh outputs every call

    fast = trident.compile(f)
    a = torch.randn(4, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(512, 1024, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        for _ in range(2):
            for got, want in zip(fast(a, w), f(a, w)):
                assert torch.equal(got, want)
    assert trident.counters(fast)["cublaslt_declined"] == 0


def test_fp32_grad_mode_and_misaligned_inputs_stay_on_aten():
    require_cuda()
    w32 = torch.randn(256, 512, device="cuda")
    x32 = torch.randn(2, 512, device="cuda")
    fast = trident.compile(lambda x, w: F.linear(x, w))
    with torch.no_grad():
        assert torch.equal(fast(x32, w32), F.linear(x32, w32))
    assert trident.counters(fast)["cublaslt_gemms"] == 0  # fp32: TF32 settings are ATen's business

    lin = nn.Linear(512, 256, bias=False, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(2, 512, device="cuda", dtype=torch.bfloat16)
    fast = trident.compile(lin)
    y = fast(x)  # grad mode, a weight that requires grad: autograd must record the GEMM
    assert y.requires_grad and y.grad_fn is not None
    assert torch.equal(y.detach(), lin(x).detach())
    assert trident.counters(fast)["cublaslt_gemms"] == 0
    w = lin.weight

    base = torch.randn(2 * 512 + 1, device="cuda", dtype=torch.bfloat16)
    xm = base[1:].view(2, 512)  # 2-byte offset: not 256-byte aligned
    fast = trident.compile(lambda x, w: F.linear(x, w))
    with torch.no_grad():
        assert torch.equal(fast(xm, w.detach()), F.linear(xm, w.detach()))


class NdMlp(nn.Module):
    """Two projections of a decode step's [B, 1, K] activations, as an HF model's linears see them;
    both results internal (the float() is returned), so both are kept buffers that may replay."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.ws = nn.ParameterList(
            nn.Parameter((torch.randn(n, k, generator=g) / k ** 0.5).to("cuda", torch.bfloat16), requires_grad=False)
            for n, k in ((5632, 2048), (2048, 5632)))

    def forward(self, x):
        return F.linear(F.linear(x, self.ws[0]), self.ws[1]).float()


@pytest.mark.parametrize("nd", [True, False], ids=["nd", "flattened"])
def test_a_contiguous_nd_input_is_multiplied_without_views(nd):
    """With linear_nd (aten_typed_gemm.h) cuBLASLt multiplies [B, 1, K] inputs into [B, 1, N] results
    directly: eager's bits, no view or _unsafe_view dispatched, and the kept results replay as the
    flattened ones do. A returned N-D result is eager's tensor: contiguous, not a view."""
    require_cuda()
    from test_hot_path_reuse import aten_calls
    before = trident._C._set_linear_nd(nd)
    try:
        model = NdMlp()
        fast = trident.compile(model, graphs=False)  # counts the ATen calls of a run, not a replay
        returned = trident.compile(lambda x, w: F.linear(x, w))
        for batch in (1, 8):
            x = torch.randn(batch, 1, 2048, device="cuda", dtype=torch.bfloat16)
            with torch.no_grad():
                for _ in range(4):  # checked against at::mm, recorded, replayed
                    assert torch.equal(fast(x), model(x))
                views = sum(aten_calls(fast, x, name=n) for n in ("aten::view", "aten::_unsafe_view"))
                x.copy_(torch.randn_like(x))  # a replay reads the new values
                assert torch.equal(fast(x), model(x))
                got, want = returned(x, model.ws[0]), F.linear(x, model.ws[0])
            assert torch.equal(got, want) and got.stride() == want.stride() and got._base is None
            assert views == (0 if nd else 4), (batch, views)
        c = trident.counters(fast)
        # both specializations' sites planned and replaying: batch 1's two keep their state when batch
        # 8's specialization is added (one object per specialization), batch 8's two are its own
        assert (c["cublaslt_gemms"], c["cublaslt_replayed"], c["cublaslt_declined"]) == (4, 4, 0), (c, refusals())
        assert trident.counters(returned)["cublaslt_declined"] == 0
    finally:
        trident._C._set_linear_nd(before)


def test_changed_reduction_setting_hands_the_site_back_to_aten():
    require_cuda()
    model = Mlp(torch.bfloat16)
    fast = trident.compile(model)
    x = torch.randn(1, 2048, device="cuda", dtype=torch.bfloat16)
    matmul = torch.backends.cuda.matmul
    saved = matmul.allow_bf16_reduced_precision_reduction
    try:
        with torch.no_grad():
            assert torch.equal(fast(x), model(x))
            matmul.allow_bf16_reduced_precision_reduction = not saved
            assert torch.equal(fast(x), model(x))
    finally:
        matmul.allow_bf16_reduced_precision_reduction = saved
    c = trident.counters(fast)
    assert (c["cublaslt_gemms"], c["cublaslt_declined"]) == (0, 4), c


def test_a_side_stream_gets_its_own_workspace():
    require_cuda()
    model = Mlp(torch.bfloat16)
    fast = trident.compile(model)
    x = torch.randn(8, 2048, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        want = model(x)
        assert torch.equal(fast(x), want)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            got = fast(x)
        torch.cuda.current_stream().wait_stream(side)
        assert torch.equal(got, want)


def test_the_workspace_is_what_the_algorithm_needs():
    """Not PyTorch's 32 MiB beside PyTorch's own: a fresh process (the workspace is per process and
    stream), memory counted after eager has run the same GEMM."""
    require_cuda()
    script = textwrap.dedent("""
        import torch, trident
        g = torch.Generator(device="cuda").manual_seed(0)
        a, b = (torch.randn(64, 64, device="cuda", generator=g).half() for _ in range(2))
        f = lambda a, b: torch.relu(torch.mm(a, b))
        want = f(a, b)
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        fast = trident.compile(f)
        for _ in range(3):
            assert torch.equal(fast(a, b), want)
        torch.cuda.synchronize()
        c = trident.counters(fast)
        assert (c["cublaslt_gemms"], c["cublaslt_declined"]) == (1, 0), c
        print("grew", torch.cuda.memory_allocated() - base)
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    grew = int(run.stdout.split("grew")[-1])
    assert grew < 4 << 20, grew


# ---- replay of recorded cuBLASLt launches (csrc/runtime/replay/launch_record.h) -------------------------

class FloatOut(nn.Module):
    """model(x).float(): the last GEMM's output becomes an intermediate, a buffer reused every call,
    so that every site sees the same pointers from one call to the next."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x).float()


def refusals():
    return trident._C.cublaslt_replay_refusals()


@pytest.mark.parametrize("batch", [1, 8])  # batch 1's down projection is split-K: two kernels
def test_repeated_pointers_replay_the_recorded_launches_bit_for_bit(batch):
    require_cuda()
    model = Mlp(torch.bfloat16)
    fast = trident.compile(FloatOut(model))
    x = torch.randn(batch, 2048, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        for _ in range(4):  # call 1 checks against at::mm, call 2 records (and checks its replay), then replays
            assert torch.equal(fast(x), model(x).float())
        c = trident.counters(fast)
        assert (c["cublaslt_gemms"], c["cublaslt_replayed"], c["cublaslt_declined"]) == (4, 4, 0), (c, refusals())
        x.copy_(torch.randn_like(x))  # same pointer, new values: a replay reads them
        assert torch.equal(fast(x), model(x).float())
        y = torch.randn(batch, 2048, device="cuda", dtype=torch.bfloat16)  # another input pointer
        assert torch.equal(fast(y), model(y).float())
        assert torch.equal(fast(x), model(x).float())


def test_alternating_inputs_are_not_replayed_at_the_site_that_reads_them():
    require_cuda()
    model = Mlp(torch.bfloat16)
    fast = trident.compile(FloatOut(model))
    xs = [torch.randn(1, 2048, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    with torch.no_grad():
        for i in range(8):
            assert torch.equal(fast(xs[i % 2]), model(xs[i % 2]).float())
    # the first GEMM never sees the same input twice in a row; the three after it read reused buffers
    assert trident.counters(fast)["cublaslt_replayed"] == 3, refusals()


def test_a_replaying_site_called_on_another_stream_uses_cublaslt_there():
    require_cuda()
    model = Mlp(torch.bfloat16)
    fast = trident.compile(FloatOut(model))
    x = torch.randn(1, 2048, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        want = model(x).float()
        for _ in range(3):
            assert torch.equal(fast(x), want)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            got = [fast(x) for _ in range(4)]  # another stream and workspace: recorded anew there
        torch.cuda.current_stream().wait_stream(side)
        for g in got:
            assert torch.equal(g, want)
        assert torch.equal(fast(x), want)


def test_replay_is_turned_off_by_the_environment():
    require_cuda()
    code = (
        "import torch, torch.nn.functional as F, trident\n"
        "w = torch.randn(512, 1024, device='cuda', dtype=torch.bfloat16)\n"
        "fast = trident.compile(lambda x: F.linear(x, w).float())\n"
        "x = torch.randn(2, 1024, device='cuda', dtype=torch.bfloat16)\n"
        "with torch.no_grad():\n"
        "    for _ in range(4): assert torch.equal(fast(x), F.linear(x, w).float())\n"
        "c = trident.counters(fast)\n"
        "print(trident._C.cublaslt_replay_refusals())\n"
        "print(c['cublaslt_gemms'], c['cublaslt_replayed'])\n")
    for env, want in (("0", "1 0"), ("1", "1 1")):
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={**os.environ, "TRIDENT_CUBLASLT_REPLAY": env})
        assert run.returncode == 0, run.stderr
        assert run.stdout.split("\n")[-2] == want, (env, run.stdout)
