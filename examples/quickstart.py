"""The README's quickstart (tests/python/test_readme_quickstart.py keeps the two the same)."""
import torch
import trident

def attend(q, k_cache, v_cache, pos: int, scale: float):
    k, v = k_cache[: pos + 1], v_cache[: pos + 1]          # a Python int used as an index
    return torch.softmax(q @ k.T * scale, dim=-1) @ v

fast = trident.compile(attend)                             # a function or an nn.Module
q, k_cache, v_cache = torch.randn(1, 64), torch.randn(128, 64), torch.randn(128, 64)
for pos in range(16):
    assert torch.allclose(fast(q, k_cache, v_cache, pos, 0.125), attend(q, k_cache, v_cache, pos, 0.125))
c = trident.counters(fast)
print(c["hits"], c["misses"], c["specializations"], c["fallbacks"])  # prints: 14 2 2 0
