"""User text that reaches the generated C (output dict keys, a custom op's string arguments) is
data, never code: it cannot end its string literal (no trigraph, no escape, no line splice), and
every byte of it comes back exactly."""
import os

import pytest
import torch

import trident


@torch.library.custom_op("trident_strings::tagged", mutates_args=())
def tagged(x: torch.Tensor, tag: str) -> torch.Tensor:
    """x plus a number that depends on every byte of tag, so a changed tag changes the result."""
    return x + float(sum((k + 1) * b for k, b in enumerate(tag.encode("utf-8", "surrogatepass"))))


@tagged.register_fake
def _(x, tag):
    return torch.empty_like(x)


_TRICKY = ["a\rb", "a\x0bb", "a\x0cb", "a\x1cb", "a\x85b", "a\u2028b", "a\x00b", "??/", "a??=b??(??)",
           "back\\slash\"quote", "line\nbreak", "\x7f\x01\x1b[31m", "é€𝄞", "trailing\\"]


def _constructor_payload(marker: str) -> str:
    # Under -std=c11, "??/" is a backslash: `??/"` would have escaped the closing quote and let the
    # rest become C code run by the dynamic loader when the module is opened.
    return ('??/"}; __attribute__((constructor)) static void pwn(void) { '
            f'extern int system(const char*); system("touch {marker}"); }} static const char* z[] = {{"')


@pytest.mark.parametrize("key", _TRICKY, ids=repr)
def test_an_output_dict_key_round_trips_exactly(key):
    fast = trident.compile(lambda x: {key: x + 1, "plain": x * 2})
    for _ in range(2):
        got = fast(torch.ones(2))
        assert list(got) == [key, "plain"] and torch.equal(got[key], torch.full((2,), 2.0))
    assert trident.counters(fast)["hits"] == 1


@pytest.mark.parametrize("tag", _TRICKY, ids=repr)
def test_a_custom_ops_string_argument_reaches_it_exactly(tag):
    fn = lambda x: tagged(x, tag) * 2  # noqa: E731
    fast = trident.compile(fn)
    for _ in range(2):
        assert torch.equal(fast(torch.ones(3)), fn(torch.ones(3)))
    assert trident.counters(fast)["hits"] == 1


def test_a_key_written_to_escape_its_literal_runs_no_code(tmp_path):
    marker = str(tmp_path / "pwned")
    key = _constructor_payload(marker)
    fast = trident.compile(lambda x: {key: x - 1})
    got = fast(torch.ones(1))
    assert list(got) == [key]
    tag_fn = lambda x: tagged(x, key)  # noqa: E731
    assert torch.equal(trident.compile(tag_fn)(torch.ones(1)), tag_fn(torch.ones(1)))
    assert not os.path.exists(marker)
