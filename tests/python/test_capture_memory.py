"""Capture must not copy the module's state or the call's tensors: strict torch.export keeps a real
clone of every lifted tensor (Dynamo's real_value_cache), one extra copy of all weights and KV caches
at the first call. trident's capture stores the tensors themselves (python/trident/_compat.py)."""
import torch
import torch.nn as nn

import trident


def test_first_call_clones_no_parameter_buffer_or_argument(monkeypatch):
    from torch._dynamo.variables import builder

    cloned = []
    orig = builder.clone_input  # what Dynamo's real-value cache copies each lifted tensor with
    monkeypatch.setattr(builder, "clone_input", lambda x, **kw: (cloned.append(tuple(x.shape)), orig(x, **kw))[1])

    model = nn.Sequential(nn.Linear(64, 48), nn.ReLU(), nn.Linear(48, 16)).eval()
    model.register_buffer("scale", torch.full((16,), 2.0))

    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = model

        def forward(self, x, cache, pos: int):
            cache[:, pos:pos + 1] = x[:, :1]
            return self.body(x) * self.body.scale

    m = Scaled()
    fast = trident.compile(m)
    x, cache = torch.randn(3, 64), torch.zeros(3, 8)
    ref_cache = cache.clone()
    out = fast(x, cache, 2)
    torch.testing.assert_close(out, m(x, ref_cache, 2))
    torch.testing.assert_close(cache, ref_cache)
    assert trident.counters(fast)["compiles"] == 1
    assert cloned == [], f"capture cloned tensors of shapes {cloned}"
