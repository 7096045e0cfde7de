"""Changes to a compiled module that no parameter or buffer registration hook reports: train() /
eval(), a parameter or buffer set to None, deleted or assigned back. Each makes the next call
capture again, and results stay eager's (trident/_state.py, CompiledFunction._on_state_change)."""
import torch

import trident


def test_eval_and_train_after_compiling_switch_batch_norm_and_dropout():
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm1d(3)
    ref = torch.nn.BatchNorm1d(3)
    fast = trident.compile(bn)
    x = torch.randn(4, 3)
    fast(x), ref(x)
    bn.eval(), ref.eval()
    assert torch.equal(fast(x), ref(x)) and torch.equal(bn.running_mean, ref.running_mean)
    bn.train(), ref.train()
    assert torch.equal(fast(x), ref(x)) and torch.equal(bn.running_mean, ref.running_mean)
    drop = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5)).eval()
    fast = trident.compile(drop)
    x = torch.randn(8, 4)
    assert torch.equal(fast(x), drop(x))
    drop.train()
    torch.manual_seed(1)
    got = fast(x)
    torch.manual_seed(1)
    assert torch.equal(got, drop(x)) and not torch.equal(got, drop.eval()(x))


def test_a_parameter_set_to_none_deleted_or_given_back():
    lin = torch.nn.Linear(4, 3)
    fast = trident.compile(lin)
    x = torch.randn(2, 4)
    fast(x)
    lin.bias = None
    assert torch.equal(fast(x), lin(x))
    lin.bias = torch.nn.Parameter(torch.ones(3))
    assert torch.equal(fast(x), lin(x))
    del lin.bias
    lin.bias = None
    assert torch.equal(fast(x), lin(x))


class WithBuffer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("b", torch.ones(3))

    def forward(self, x):
        return x + self.b if self.b is not None else x * 2


def test_a_buffer_set_to_none_and_assigned_back():
    m = WithBuffer()
    fast = trident.compile(m)
    x = torch.randn(3)
    assert torch.equal(fast(x), m(x))
    m.b = None
    assert torch.equal(fast(x), m(x))
    m.b = torch.full((3,), 2.0)
    assert torch.equal(fast(x), m(x))
