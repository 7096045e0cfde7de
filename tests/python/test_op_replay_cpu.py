"""Which ATen call sites may replay their recorded launches (csrc/runtime/replay/op_replay.h), checked on a
machine without a GPU: the sites are chosen when a module loads, before anything runs. cuDNN
attention has no CPU kernel, so running these modules fails, clearly, as any ATen call without a
kernel for its device does."""
import os
import subprocess
import sys

import pytest
import torch

import trident
from trident import _C, _compat


def cudnn_attention(dropout_p=0.0, return_debug_mask=False):
    def attention(q, k, v, bias):
        return torch.ops.aten._scaled_dot_product_cudnn_attention(
            q, k, v, bias, False, dropout_p, False, return_debug_mask, scale=0.25)[0]
    return attention


def attention_inputs():
    return (torch.randn(1, 4, 1, 16), torch.randn(1, 4, 8, 16), torch.randn(1, 4, 8, 16), torch.zeros(1, 1, 1, 8))


def replay_sites(fn) -> int:
    fast = trident.compile(fn)
    with pytest.raises(RuntimeError, match="_scaled_dot_product_cudnn_attention.*CPU"):
        fast(*attention_inputs())
    return trident.counters(fast)["aten_replay_sites"]


def test_cudnn_attention_without_dropout_is_a_replay_site():
    assert replay_sites(cudnn_attention()) == 1


@pytest.mark.parametrize("kwargs", [
    {"dropout_p": 0.1},             # random numbers a replay would repeat
    {"return_debug_mask": True},    # a return the site does not keep
])
def test_attention_calls_that_must_not_replay_are_not_sites(kwargs):
    assert replay_sites(cudnn_attention(**kwargs)) == 0


def test_other_aten_calls_are_not_replay_sites():
    fast = trident.compile(lambda x: torch.softmax(x, -1) @ x.t())
    x = torch.randn(4, 8)
    torch.testing.assert_close(fast(x), torch.softmax(x, -1) @ x.t(), rtol=0, atol=0)
    assert trident.counters(fast)["aten_replay_sites"] == 0 and trident.counters(fast)["aten_replayed"] == 0


def printed_with_replay_switch(code: str, value: str) -> str:
    """The last line `code` prints in a new interpreter (this folder importable) run with
    TRIDENT_ATEN_REPLAY=value: the switch is read once, when the first module loads."""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         cwd=os.path.dirname(__file__), env={**os.environ, "TRIDENT_ATEN_REPLAY": value})
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout.strip().splitlines()[-1]


def test_the_environment_switch_turns_replay_off():
    code = ("import torch, trident\n"
            "from test_op_replay_cpu import cudnn_attention, attention_inputs\n"
            "f = trident.compile(cudnn_attention())\n"
            "try:\n    f(*attention_inputs())\nexcept RuntimeError:\n    pass\n"
            "print(trident.counters(f)['aten_replay_sites'])\n")
    for env, want in (("0", "0"), ("1", "1")):
        assert printed_with_replay_switch(code, env) == want, env


def test_the_private_pool_api_is_found_and_installed_checks_its_arguments():
    api = _compat.private_pool_api()
    assert api is not None and api is not trident._recording_pools  # torch >= 2.8 has PyTorch's bindings
    assert trident._recording_pools.pools() == 0
    with pytest.raises(TypeError, match="four callables"):
        _C.set_private_pool_api(1, 2, 3, 4)
    assert _C.aten_replay_refusals() == []  # nothing recorded on a CPU: no site has stopped


def test_the_diagnostic_switch_applies_to_modules_loaded_after_it():
    before = _C._set_aten_replay(False)
    try:
        assert replay_sites(cudnn_attention()) == 0
    finally:
        assert _C._set_aten_replay(before) is False
    assert replay_sites(cudnn_attention()) == (1 if before else 0)
