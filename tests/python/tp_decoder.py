"""A Llama-style decoder and its tensor-parallel shard, the way Megatron-style TP splits it: the
attention heads and the MLP's hidden units divided over the ranks (column-parallel q/k/v and
gate/up, row-parallel o and down), one all-reduce after attention and one after the MLP. The shard
of rank r is cut from the full model's weights, so every rank's result can be compared with the
unsharded model's."""
import torch
import torch.distributed as dist
import torch.nn.functional as F


def full_weights(layers: int, d: int, heads: int, ffn: int, seed: int = 0) -> list[dict]:
    g = torch.Generator().manual_seed(seed)

    def w(*shape):
        return torch.randn(*shape, generator=g) * shape[-1] ** -0.5
    return [{"norm1": 1 + 0.1 * torch.randn(d, generator=g), "q": w(d, d), "k": w(d, d), "v": w(d, d),
             "o": w(d, d), "norm2": 1 + 0.1 * torch.randn(d, generator=g), "gate": w(ffn, d), "up": w(ffn, d),
             "down": w(d, ffn)} for _ in range(layers)]


def shard(weights: list[dict], heads: int, rank: int, world: int) -> list[dict]:
    """Rank `rank`'s part: output rows of q/k/v/gate/up, input columns of o/down."""
    out = []
    for w in weights:
        d, ffn = w["q"].shape[0], w["gate"].shape[0]
        hd, rows = d // world, ffn // world
        cols = slice(rank * hd, (rank + 1) * hd)
        f = slice(rank * rows, (rank + 1) * rows)
        out.append({"norm1": w["norm1"], "q": w["q"][cols].contiguous(), "k": w["k"][cols].contiguous(),
                    "v": w["v"][cols].contiguous(), "o": w["o"][:, cols].contiguous(), "norm2": w["norm2"],
                    "gate": w["gate"][f].contiguous(), "up": w["up"][f].contiguous(),
                    "down": w["down"][:, f].contiguous()})
    return out


def _rms(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


class Decoder(torch.nn.Module):
    """`heads` attention heads of the layers' weights (all of them, or one rank's share); with a
    process group, the partial sums are all-reduced: through the functional collective or the
    in-place torch.distributed.all_reduce (`inplace`)."""

    def __init__(self, weights, heads: int, group=None, inplace: bool = False):
        super().__init__()
        self.heads, self.group, self.inplace = heads, group, inplace
        self.layers = torch.nn.ModuleList()
        for w in weights:
            m = torch.nn.Module()
            for k, v in w.items():
                m.register_buffer(k, v)
            self.layers.append(m)

    def _reduce(self, x):
        if self.group is None:
            return x
        if self.inplace:
            dist.all_reduce(x, group=self.group)
            return x
        import torch.distributed._functional_collectives as fc
        return fc.all_reduce(x, "sum", self.group)

    def forward(self, x):  # x: (batch, seq, d)
        b, s, _ = x.shape
        for m in self.layers:
            h = _rms(x, m.norm1)
            q, k, v = (F.linear(h, w).view(b, s, self.heads, -1).transpose(1, 2) for w in (m.q, m.k, m.v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, -1)
            x = x + self._reduce(F.linear(a, m.o))
            h = _rms(x, m.norm2)
            x = x + self._reduce(F.linear(F.silu(F.linear(h, m.gate)) * F.linear(h, m.up), m.down))
        return x
