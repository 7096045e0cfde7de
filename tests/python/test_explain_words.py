"""trident.explain states each specialization's guards in the user's words: leaves named as the call
names them, dtypes and devices by name, an int's bounds as a range, run-time floats as such (the
host IR's coded lines stay below them, python/trident/guard_words.py)."""
import torch

import trident
from trident.guard_words import spec_in_words


def step(x, cache, pos: int, scale: float):
    cache[pos] = x[0] * scale
    return cache[: pos + 1].sum(0)


def served_lines(fast):
    return [l for l in trident.explain(fast).splitlines() if "serves calls where:" in l]


def test_a_decode_step_s_guards_read_as_its_arguments():
    fast = trident.compile(step)
    cache = torch.zeros(64, 8)
    for p in range(4):
        fast(torch.randn(1, 8), cache, p, 0.5 + p)
    first, symbolic = served_lines(fast)
    assert "x: float32 tensor on cpu, shape (1, 8), strides (8, 1)" in first and "pos == 0" in first
    assert "scale: a float (a run-time value)" in first and "x and cache do not overlap" in first
    assert "pos: an int (symbolic)" in symbolic and "pos in [0, 64)" in symbolic
    assert "L2" not in symbolic


def test_nested_arguments_are_named_by_their_path():
    def f(batch, opt=None):
        return batch["ids"] * 2 + batch["pair"][1]

    fast = trident.compile(f)
    fast({"ids": torch.ones(3), "pair": (torch.ones(3), torch.zeros(3))})
    (line,) = served_lines(fast)
    assert "batch['ids']: float32 tensor on cpu, shape (3,), strides (1,)" in line
    assert "batch['pair'][1]: float32 tensor" in line


def test_the_words_of_a_host_ir_text():
    text = "\n".join([
        "spec 0 structure \"TbN\" {",
        "  guard grad_mode == 0",
        "  guard L0.kind == 1", "  guard L0.dtype == 15", "  guard L0.device_type == 1", "  guard L0.device_index == 0",
        "  guard L0.dim == 2", "  guard L0.flags == 0", "  guard L0.size[1] == 64", "  guard L0.stride[0] == 64",
        "  guard L0.stride[1] == 1",
        "  guard L1.kind == 4", "  guard L1.ival == 1",
        "  guard L2.kind == 0",
        '  guard expr "(L0.size[0] >= 2)"', '  guard expr "L0.size[0] <= 4096"',
        "}"])
    words = spec_in_words(text, ["y", "flag", "opt"])
    assert words == ["grad mode off", "y: bfloat16 tensor on cuda:0, shape (*, 64), strides (64, 1)",
                     "flag is True", "opt is None", "y.size(0) in [2, 4097)"]
    assert spec_in_words(text, None)[1].startswith("L0: bfloat16 tensor")


def test_global_settings_a_specialization_serves_are_said():
    """The structure string's settings suffix in words: the default dtype, deterministic algorithms
    and torch.autocast, none at the defaults; a str argument that looks like the suffix is an argument."""
    def f(x, tag: str):
        return torch.ones(2) + x.sum()

    fast = trident.compile(f)
    x = torch.randn(4)
    fast(x, "@7.1")
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        fast(x, "a")
    finally:
        torch.set_default_dtype(previous)
    torch.use_deterministic_algorithms(True)
    try:
        fast(x, "a")
    finally:
        torch.use_deterministic_algorithms(False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fast(x, "a")
    plain, wide, det, autocast = served_lines(fast)
    assert "default dtype" not in plain and "deterministic" not in plain and "autocast" not in plain
    assert "default dtype float64" in wide and "deterministic" not in wide
    assert "deterministic algorithms on" in det and "default dtype" not in det
    assert "under torch.autocast(cpu, bfloat16)" in autocast and "deterministic" not in autocast


def test_settings_are_read_past_keyword_names_that_look_like_codes():
    """A keyword named like a str code (`s2`) is a name, not a constant's length."""
    def f(x, s2):
        return torch.ones(2) + x.sum() + s2

    fast = trident.compile(f)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        fast(torch.randn(4), s2=torch.ones(2))
    finally:
        torch.set_default_dtype(previous)
    (line,) = served_lines(fast)
    assert "default dtype float64" in line and "s2: float64 tensor" in line
