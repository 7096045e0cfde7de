"""What code that inspects a callable sees of a compiled one: `__wrapped__` is the function or module
compiled, so inspect.signature gives its signature, and transformers' generate(), which checks its
keyword arguments against forward's signature, runs with a compiled forward."""
import inspect
import sys
from pathlib import Path

import torch

import trident


def add(x, y: int = 1):
    return x + y


def test_signature_and_wrapped_follow_the_compiled_function_or_module():
    fast = trident.compile(add)
    assert fast.__wrapped__ is add and str(inspect.signature(fast)) == "(x, y: int = 1)"
    lin = torch.nn.Linear(2, 2)
    assert trident.compile(lin).__wrapped__ is lin
    assert list(inspect.signature(trident.compile(lin.forward)).parameters) == ["input"]


def test_hf_generate_with_a_compiled_forward_gives_eagers_tokens():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import hf_llama
    model = hf_llama.build_model(hf_llama.TINY, "cpu")
    ids = torch.tensor([[3, 14, 15, 9]])
    with torch.no_grad():
        want = model.generate(ids, max_new_tokens=6, do_sample=False)
        model.forward = trident.compile(model.forward)
        got = model.generate(ids, max_new_tokens=6, do_sample=False)
    assert torch.equal(got, want)


def test_compiling_a_whole_hf_model_called_with_its_defaults_matches_eager():
    """The model's own defaults (use_cache=True, return_dict=True): the ModelOutput comes back as
    its own type, holding the DynamicCache the model made (built natively), and passing that cache
    back in runs natively too."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import hf_llama
    model = hf_llama.build_model(hf_llama.TINY, "cpu")
    fast = trident.compile(model)
    ids = torch.tensor([[3, 14, 15, 9]])
    with torch.no_grad():
        for _ in range(3):
            got, want = fast(ids), model(ids)
            assert type(got) is type(want) and type(got.past_key_values) is type(want.past_key_values)
            torch.testing.assert_close(got.logits, want.logits)
            for a, b in zip(got.past_key_values.layers, want.past_key_values.layers):
                torch.testing.assert_close(a.keys, b.keys)
            nxt, ref = fast(ids[:, :1], past_key_values=got.past_key_values), \
                model(ids[:, :1], past_key_values=want.past_key_values)
            assert nxt.past_key_values is got.past_key_values
            torch.testing.assert_close(nxt.logits, ref.logits)
        assert torch.equal(fast(ids, use_cache=False, return_dict=False)[0], model(ids, use_cache=False).logits)
    c = trident.counters(fast)
    assert c["fallbacks"] == 0 and c["hits"] >= 4
