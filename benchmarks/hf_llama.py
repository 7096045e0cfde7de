"""A real model: a Hugging Face `transformers` Llama built from a config with seeded random weights
(nothing is downloaded), its RMSNorms and its MLP activation (SiLU) swapped for user Triton kernels
on CUDA, and a greedy decode step that is the HF model's own forward over a static KV cache.

    model = build_model(QUICK, device="cuda")          # bf16 on CUDA, fp32 on CPU
    use_kernels(model, triton=True)                    # Triton RMSNorm + SiLU (CUDA only)
    step = DecodeStep(model, batch=1, max_cache_len=QUICK.max_cache)
    next_ids = step(input_ids, cache_position)         # [B, 1] long, [1] long -> [B] long

The KV cache tensors are buffers of the step module, written in place by the HF cache's own
`index_copy_`: strict torch.export (trident's capture) takes in-place mutation of buffers, not of
tensors merely reachable from a Python object. This is how transformers' own export recipe works
(`transformers.integrations.executorch.TorchExportableModuleWithStaticCache`), which DecodeStep uses
when the installed transformers has it and it works; otherwise it builds the equivalent itself
(StaticCache, its per-layer tensors registered as buffers). Both paths are feature-detected, so the
code runs on transformers 4.4x-4.55 (`cache.key_cache[i]`, `past_key_values=`, `cache_position=`),
4.56+ (`cache.layers[i].keys`, lazily allocated) and 5.x (`cache=`, the write position a
`cumulative_length` tensor per layer). Developed and tested against 5.24.0 (CI's pin)."""
import inspect
import os
import statistics
import time
from dataclasses import dataclass, replace

os.environ.setdefault("HF_HUB_OFFLINE", "1")      # never reach the Hub: the model is built from a config

import torch
import torch.nn as nn

import kernels   # the user Triton kernels (benchmarks/kernels.py); only launched on CUDA


@dataclass(frozen=True)
class HFLlamaConfig:
    hidden: int = 2048
    layers: int = 8
    heads: int = 16
    kv_heads: int = 8           # grouped-query attention
    intermediate: int = 5632
    vocab: int = 32000
    max_cache: int = 256        # static KV cache length (also max_position_embeddings)
    prompt_len: int = 16
    new_tokens: int = 64        # timed greedy decode steps
    eps: float = 1e-6


FULL = HFLlamaConfig()
QUICK = replace(FULL, layers=2, hidden=1024, intermediate=2816)
TINY = HFLlamaConfig(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, vocab=128, max_cache=96)  # CPU tests

# "sdpa": HF's default attention; it lowers to one ATen scaled-dot-product-attention op per layer.
ATTN_IMPLEMENTATION = "sdpa"


def default_dtype(device):
    return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32


def build_model(cfg: HFLlamaConfig, device="cpu", dtype=None, seed=0, attn_implementation=ATTN_IMPLEMENTATION):
    """transformers.LlamaForCausalLM from a LlamaConfig, seeded random weights (HF's own init), in
    eval mode on `device` in `dtype` (default: bf16 on CUDA, fp32 on CPU)."""
    from transformers import LlamaConfig, LlamaForCausalLM
    dtype = dtype or default_dtype(device)
    config = LlamaConfig(hidden_size=cfg.hidden, intermediate_size=cfg.intermediate, num_hidden_layers=cfg.layers,
                         num_attention_heads=cfg.heads, num_key_value_heads=cfg.kv_heads, vocab_size=cfg.vocab,
                         max_position_embeddings=cfg.max_cache, rms_norm_eps=cfg.eps, hidden_act="silu",
                         tie_word_embeddings=False, use_cache=True, attn_implementation=attn_implementation,
                         architectures=["LlamaForCausalLM"])   # as a checkpoint's config says (4.4x's recipe reads it)
    # the config's dtype field: `dtype` from 4.56 (`torch_dtype` then warns), `torch_dtype` before
    setattr(config, "dtype" if "dtype" in vars(config) else "torch_dtype", dtype)
    try:
        config._attn_implementation = attn_implementation
    except Exception:  # noqa: BLE001  (versions where it is read-only take the constructor argument)
        pass
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)               # initialized on the CPU: same weights on any device
    model = model.to(device=device, dtype=dtype).eval()
    model.requires_grad_(False)
    return model


# ---- user Triton kernels in place of the HF ops -----------------------------------------------

class TritonRMSNorm(nn.Module):
    """LlamaRMSNorm computed by kernels.rmsnorm (2-D): [B, T, H] is reshaped to rows and back. Same
    weight Parameter and eps as the HF module it replaces (kept, not as a submodule, for undoing)."""

    def __init__(self, hf_norm):
        super().__init__()
        self.weight = hf_norm.weight
        self.variance_epsilon = hf_norm.variance_epsilon
        self.__dict__["hf_module"] = hf_norm

    def forward(self, hidden_states):
        shape = hidden_states.shape
        out = kernels.rmsnorm(hidden_states.reshape(-1, shape[-1]), self.weight, self.variance_epsilon)
        return out.view(shape)


class TritonSiLU(nn.Module):
    """The MLP activation (HF's SiLU) computed by kernels.silu."""

    def __init__(self, hf_act):
        super().__init__()
        self.__dict__["hf_module"] = hf_act

    def forward(self, x):
        return kernels.silu(x)


def use_kernels(model, triton=True):
    """Swap every LlamaRMSNorm for TritonRMSNorm and every LlamaMLP.act_fn for TritonSiLU
    (triton=True), or put HF's modules back (triton=False). Returns the number of modules swapped.
    Only the computation changes: the HF forward that calls these modules is untouched."""
    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if triton and type(child).__name__ == "LlamaRMSNorm":
                new = TritonRMSNorm(child)
            elif triton and name == "act_fn" and type(parent).__name__ == "LlamaMLP":
                new = TritonSiLU(child)
            elif not triton and isinstance(child, (TritonRMSNorm, TritonSiLU)):
                new = child.hf_module
            else:
                continue
            setattr(parent, name, new)
            swapped += 1
    return swapped


def uses_triton(model):
    return any(isinstance(m, (TritonRMSNorm, TritonSiLU)) for m in model.modules())


# ---- the decode step: HF forward over a static KV cache held as buffers -------------------------

def _params(fn):
    try:
        return inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}


def _head_shape(config):
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return getattr(config, "num_key_value_heads", None) or heads, head_dim


def _cache_layer_tensors(cache):
    """[(name, tensor)] of a StaticCache's per-layer state, for any transformers version; None where a
    layer is not allocated yet (lazy initialization)."""
    out = []
    if hasattr(cache, "layers"):                                        # 4.56+ / 5.x
        for i, layer in enumerate(cache.layers):
            out += [(f"key_cache_{i}", getattr(layer, "keys", None)),
                    (f"value_cache_{i}", getattr(layer, "values", None))]
            if isinstance(getattr(layer, "cumulative_length", None), torch.Tensor):
                out.append((f"cumulative_length_{i}", layer.cumulative_length))
    else:                                                               # 4.4x-4.55
        for i, (k, v) in enumerate(zip(cache.key_cache, cache.value_cache)):
            out += [(f"key_cache_{i}", k), (f"value_cache_{i}", v)]
    return out


def _static_cache(model, batch, max_cache_len, device, dtype):
    """A transformers StaticCache with every layer allocated, whatever the constructor's version."""
    from transformers import StaticCache
    config = model.config
    params = _params(StaticCache.__init__)
    kwargs = {"config": config, "max_cache_len": max_cache_len}
    for name, value in (("max_batch_size", batch), ("batch_size", batch), ("device", device), ("dtype", dtype)):
        if name in params and not (name == "batch_size" and "max_batch_size" in params):
            kwargs[name] = value
    cache = StaticCache(**kwargs)
    if any(t is None for _, t in _cache_layer_tensors(cache)):
        if hasattr(cache, "early_initialization"):
            kv_heads, head_dim = _head_shape(config)
            cache.early_initialization(batch, kv_heads, head_dim, dtype, device)
        else:   # lazily allocated and no way to allocate ahead: one eager step allocates, then zero it
            kv_heads, head_dim = _head_shape(config)
            k = torch.zeros((batch, kv_heads, 1, head_dim), dtype=dtype, device=device)
            for i in range(config.num_hidden_layers):
                cache.update(k, k, i, {"cache_position": torch.zeros(1, dtype=torch.long, device=device)})
    tensors = _cache_layer_tensors(cache)
    if any(t is None for _, t in tensors):
        raise RuntimeError("StaticCache layers are not allocated after initialization")
    for _, t in tensors:
        t.zero_()
    return cache


class _OwnStaticCacheLM(nn.Module):
    """The equivalent of transformers' TorchExportableModuleWithStaticCache, for versions without it
    (or where it fails): a StaticCache whose per-layer tensors are buffers of this module, and the HF
    forward called with it. forward(input_ids [B, T], cache_position [T]) -> logits [B, T, V]."""

    def __init__(self, model, batch, max_cache_len, device):
        super().__init__()
        self.model = model
        self.static_cache = _static_cache(model, batch, max_cache_len, device, model.dtype)
        for name, t in _cache_layer_tensors(self.static_cache):
            self.register_buffer(name, t, persistent=False)
        p = _params(model.forward)
        self._cache_kw = "cache" if "cache" in p else "past_key_values"
        self._pass_cache_position = "cache_position" in p
        self._cumulative = [t for name, t in _cache_layer_tensors(self.static_cache) if name.startswith("cumul")]

    def forward(self, input_ids, cache_position):
        for t in self._cumulative:            # 5.x: the cache's write position is a tensor of its own
            t.copy_(cache_position[0])
        kwargs = {self._cache_kw: self.static_cache}
        if self._pass_cache_position:
            kwargs["cache_position"] = cache_position
        out = self.model(input_ids=input_ids, position_ids=cache_position.unsqueeze(0), use_cache=True,
                         attention_mask=None, **kwargs)
        return out.logits


def _hf_exportable(model, batch, max_cache_len, device):
    """transformers' own TorchExportableModuleWithStaticCache, across its constructor's versions."""
    from transformers.integrations.executorch import TorchExportableModuleWithStaticCache as Exportable
    from transformers import GenerationConfig
    model.generation_config = GenerationConfig(
        use_cache=True, cache_implementation="static", max_length=max_cache_len,
        cache_config={"batch_size": batch, "max_cache_len": max_cache_len, "device": str(device)})
    p = _params(Exportable.__init__)
    kwargs = {k: v for k, v in (("batch_size", batch), ("max_cache_len", max_cache_len), ("device", device))
              if k in p}
    return Exportable(model, **kwargs)


class DecodeStep(nn.Module):
    """One greedy step of the HF model: forward(input_ids [B, 1], cache_position [1] long) -> next
    token ids [B] (argmax of the last logits); with_logits=True also returns those logits [B, V].

    impl: "auto" (transformers' TorchExportableModuleWithStaticCache if present and working, else the
    equivalent built here), "hf" or "own". `self.impl` says which one was used."""

    def __init__(self, model, batch, max_cache_len, impl="auto", with_logits=False):
        super().__init__()
        device = next(model.parameters()).device
        self.with_logits = with_logits
        self.lm, self.impl, errors = None, None, []
        for kind in (("hf", "own") if impl == "auto" else (impl,)):
            try:
                lm = _hf_exportable(model, batch, max_cache_len, device) if kind == "hf" else \
                    _OwnStaticCacheLM(model, batch, max_cache_len, device)
                if not any(n.rsplit(".", 1)[-1].startswith("key_cache") for n, _ in lm.named_buffers()):
                    raise RuntimeError("the KV cache is not registered as buffers")
                with torch.no_grad():   # a smoke step proves it works (the cache is zeroed after)
                    probe = lm(input_ids=torch.zeros((batch, 1), dtype=torch.long, device=device),
                               cache_position=torch.zeros(1, dtype=torch.long, device=device))
                if probe.shape[:2] != (batch, 1):
                    raise RuntimeError(f"unexpected logits shape {tuple(probe.shape)}")
                self.lm, self.impl = lm, kind
                break
            except Exception as e:  # noqa: BLE001  (try the next way; all messages kept)
                errors.append(f"{kind}: {type(e).__name__}: {e}")
        if self.lm is None:
            raise RuntimeError("no static-cache wrapper works: " + "; ".join(errors))
        self.fallback_reasons = errors
        self.reset()

    def cache_tensors(self):
        return [t for n, t in self.named_buffers() if n.rsplit(".", 1)[-1].startswith(("key_cache", "value_cache"))]

    @torch.no_grad()
    def reset(self):
        """Zero the KV cache (in place: the buffers stay the same tensors)."""
        for t in self.cache_tensors():
            t.zero_()
        for n, t in self.named_buffers():
            if n.rsplit(".", 1)[-1].startswith("cumulative_length"):
                t.zero_()

    def forward(self, input_ids, cache_position):
        logits = self.lm(input_ids=input_ids, cache_position=cache_position)[:, -1, :]
        next_ids = logits.argmax(-1)
        return (next_ids, logits) if self.with_logits else next_ids


# ---- greedy generation ------------------------------------------------------------------------

def make_prompt(cfg, batch, device, seed=3):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, cfg.vocab, (batch, cfg.prompt_len), generator=g).to(device)


def _keep(out):
    """A copy of a step's output that the caller keeps: with reduce-overhead (CUDA graph trees) a
    replay's outputs live in the graph's memory pool and the next replay overwrites them, so, as
    gpt-fast's decode loop does, each token is cloned before it is fed back and collected; once the
    previous output is dead, each call replays the same graph. Every mode pays the same clone."""
    if isinstance(out, tuple):
        return tuple(t.clone() for t in out)
    return out.clone()


class Generation:
    """Inputs of one greedy generation, made once (untimed): the prompt's per-step [B, 1] inputs and
    every cache_position tensor. All [B, 1] inputs are contiguous, like a [B] argmax viewed as [B, 1],
    so prefill and decode calls present the same argument layout."""

    def __init__(self, cfg, batch, device, seed=3):
        self.batch, self.new_tokens = batch, cfg.new_tokens
        prompt = make_prompt(cfg, batch, device, seed)
        self.prompt_steps = [prompt[:, i:i + 1].clone(memory_format=torch.contiguous_format)
                             for i in range(cfg.prompt_len)]   # strides (1, 1), as tok.view(B, 1)
        n = cfg.prompt_len + cfg.new_tokens
        if n > cfg.max_cache:
            raise ValueError(f"prompt + new tokens ({n}) exceed the cache ({cfg.max_cache})")
        self.positions = [torch.tensor([p], dtype=torch.long, device=device) for p in range(n)]

    def prefill(self, step):
        """The prompt through the step, one token at a time; returns the step's last output."""
        out = None
        for i, ids in enumerate(self.prompt_steps):
            out = _keep(step(ids, self.positions[i]))
        return out

    def decode(self, step, first):
        """new_tokens greedy steps from `first` (the prefill's next ids [B]); returns their outputs."""
        p0, b, outs, tok = len(self.prompt_steps), self.batch, [], first
        for j in range(self.new_tokens):
            out = _keep(step(tok.view(b, 1), self.positions[p0 + j]))
            tok = out[0] if isinstance(out, tuple) else out
            outs.append(out)
        return outs

    def run(self, step, reset):
        """reset(), prefill, decode: (tokens [B, 1 + new_tokens], per-step logits or None)."""
        reset()
        first = self.prefill(step)
        outs = self.decode(step, first[0] if isinstance(first, tuple) else first)
        steps = [first] + outs
        if isinstance(first, tuple):
            return torch.stack([o[0] for o in steps], 1), torch.stack([o[1] for o in steps], 1)
        return torch.stack(steps, 1), None

    def teacher_forced(self, step, reset, tokens):
        """Per-step logits [B, 1 + new_tokens, V] of a with_logits step fed `tokens` (another run's
        greedy output) instead of its own argmax: compares two models without divergence."""
        reset()
        p0, b = len(self.prompt_steps), self.batch
        logits = [self.prefill(step)[1]]
        for j in range(self.new_tokens):
            logits.append(step(tokens[:, j].contiguous().view(b, 1), self.positions[p0 + j])[1])
        return torch.stack(logits, 1)

    def time_decode(self, step, reset, repeats, sync):
        """Median seconds of the new_tokens decode steps (synced at the end); before each repeat,
        untimed: reset(), prefill. Returns (median_s, samples_s, tokens [B, 1 + new_tokens] of the
        last repeat, for checking that timed runs generate what the first one did)."""
        samples = []
        for _ in range(repeats):
            reset()
            first = self.prefill(step)
            sync()
            t0 = time.perf_counter()
            outs = self.decode(step, first)
            sync()
            samples.append(time.perf_counter() - t0)
        return statistics.median(samples), samples, torch.stack([first] + outs, 1)


def compare_tokens(got, want):
    """Token agreement of two [B, N] greedy outputs: matching positions, total, and for each row the
    first step where they differ (None: identical)."""
    eq = got.cpu() == want.cpu()
    first = []
    for row in eq:
        bad = (~row).nonzero()
        first.append(int(bad[0]) if len(bad) else None)
    return {"match": int(eq.sum()), "total": eq.numel(), "first_mismatch": first, "ok": bool(eq.all())}


def top2_margin(logits):
    """Difference between the largest and second largest logit, [..., V] -> [...] (fp32)."""
    top = logits.float().topk(2, dim=-1).values
    return top[..., 0] - top[..., 1]


def tie_tolerance(logits, ulps=2):
    """A margin at or below this is a near-tie: `ulps` units of rounding of the top logit in the
    logits' dtype (bf16: about 0.03 for a top logit of 2; fp32: about 5e-7), [..., V] -> [...]."""
    top = logits.float().amax(-1).abs()
    return ulps * torch.finfo(logits.dtype).eps * top
