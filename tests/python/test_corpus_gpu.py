"""The CPU corpus on CUDA tensors (GPU machine: pytest -m gpu). Same comparisons as
test_corpus_cpu: outputs, in-place mutations, aliasing and counters against eager on the device.
Cases whose eager version fails on CUDA (a tensor created on the CPU inside the function, mixed
with CUDA inputs) must fail the same way under trident."""
import pytest
import torch
import torch.nn as nn

import trident
from corpus import CORPUS, alias_signature, assert_tree_close, clone_tree, instantiate, tolerances

pytestmark = pytest.mark.gpu


def _to_cuda(tree):
    if isinstance(tree, torch.Tensor):
        t = tree.detach().to("cuda").requires_grad_(tree.requires_grad)
        return t
    if isinstance(tree, (list, tuple)):
        return type(tree)(_to_cuda(x) for x in tree)
    return tree


def _params():
    out = []
    for case in CORPUS:
        out.append(pytest.param(case, None, id=case.name))
        if torch.bfloat16 in case.dtypes:
            out.append(pytest.param(case, torch.bfloat16, id=f"{case.name}-bfloat16"))
    return out


@pytest.mark.parametrize("case,dtype", _params())
def test_corpus_cuda_matches_eager(case, dtype):
    if not torch.cuda.is_available():
        pytest.fail("GPU test run without a CUDA device")
    fn = instantiate(case, dtype)
    if isinstance(fn, nn.Module):
        fn = fn.to("cuda")
    fast = trident.compile(fn)
    atol, rtol = tolerances(case, dtype)
    ctx = torch.enable_grad if case.grad else torch.no_grad
    for i, seed in enumerate((0, 1)):
        original = _to_cuda(case.make_inputs(seed, dtype))
        eager_in, fast_in = clone_tree(original), clone_tree(original)
        with ctx():
            try:
                expected = fn(*eager_in)
            except RuntimeError:
                with pytest.raises(Exception):
                    fast(*fast_in)
                return
            actual = fast(*fast_in)
        torch.cuda.synchronize()
        where = f"{case.name}[cuda, seed={seed}]"
        assert_tree_close(actual, expected, atol, rtol, path=f"{where} output")
        assert_tree_close(fast_in, eager_in, atol, rtol, path=f"{where} inputs after call")
        assert alias_signature(actual, fast_in) == alias_signature(expected, eager_in), where
        c = trident.counters(fast)
        assert (c["hits"], c["misses"], c["compiles"]) == (i, 1, 1), f"{where}: {c}"
