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


def test_compiling_a_whole_hf_model_says_what_to_pass_and_then_matches_eager():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import hf_llama
    model = hf_llama.build_model(hf_llama.TINY, "cpu")
    fast = trident.compile(model)
    ids = torch.tensor([[3, 14, 15, 9]])
    with torch.no_grad():
        for kwargs, says in (({}, "use_cache=False and return_dict=False"),
                             ({"use_cache": False}, "return_dict=False")):
            try:
                fast(ids, **kwargs)
                raise AssertionError(f"{kwargs}: expected an UnsupportedError")
            except trident.UnsupportedError as e:
                assert says in str(e), str(e)
        got = fast(ids, use_cache=False, return_dict=False)[0]
        assert torch.equal(got, model(ids, use_cache=False).logits)
