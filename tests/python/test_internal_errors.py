"""Two kinds of failure (csrc/common/errors.h): host IR the caller gets wrong is a ValueError saying
what was expected; a broken invariant of trident (here: a call site whose operands do not fit the
operator's schema, which only a lowering bug could emit) is a RuntimeError that says it is trident's
bug and how to report it, naming the source line that found it. Either way the SCM is unchanged."""
import pytest
import torch

from trident import _C

SPEC = """spec 0 structure "T" {
  guard L0.kind == 1
  guard L0.dtype == 6
  guard L0.dim == 1
  %0 = arg 0
  %1 = call "aten::add.Tensor" (%0, 1, 1)
  return %1
}
"""


def test_a_broken_invariant_says_it_is_a_bug_in_trident():
    scm = _C.SCM(lambda *a, **k: None)
    bad = SPEC.replace("(%0, 1, 1)", "(%0, 1)")  # aten::add.Tensor takes three operands
    with pytest.raises(RuntimeError) as e:
        scm.add_spec(bad)
    msg = str(e.value)
    assert msg.startswith("trident internal error (a bug in trident, not in your program; please report it")
    assert "aten::add.Tensor" in msg and "takes 3 arguments, the site gives 2" in msg
    assert "[csrc/runtime/aten/aten_site.cpp:" in msg
    assert scm.counters()["specializations"] == 0
    assert scm.add_spec(SPEC) == 0  # still usable
    x = torch.ones(3)
    torch.testing.assert_close(scm(x), x + 1)


def test_host_ir_the_caller_got_wrong_is_a_value_error():
    with pytest.raises(ValueError, match="host IR"):
        _C.SCM(lambda *a, **k: None).add_spec(SPEC.replace("%1 = call", "%1 = cal"))
