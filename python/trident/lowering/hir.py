"""The host IR's syntax (docs/host_ir.md), written in one place: the lowering builds every line of a
spec with these functions instead of formatting IR text itself. The C++ parser (csrc/ir/parser.cpp)
reads what they write. Each returns one line without its indentation; operands are IR text already
(`%3`, `$2`, `$f1`, `arg(0)`, literals: lower.py's `operand`; output trees and their updates:
output_trees.py), values are the names the lowering gave out (`%N`, `$N`, `$fN`).
tests/python/test_lowering_golden.py holds what they write for a set of functions."""
from __future__ import annotations

import re
from typing import Sequence

_AS_ITSELF = re.compile(r"[\x20\x21\x23-\x3e\x40-\x5b\x5d-\x7e]*")  # what quote() keeps as it is


def quote(s: str) -> str:
    """A host IR string literal, spelled as the C++ printer spells it (ir::quote): printable ASCII
    other than '"', '\\' and '?' as itself, every other UTF-8 byte as a three-digit octal escape.
    No character of user text (an output key, a custom op's string argument) can end the literal,
    form a trigraph or split a line, in the IR or in the generated C, and every byte round-trips."""
    if _AS_ITSELF.fullmatch(s):
        return '"' + s + '"'  # the usual case (op names, cubin paths)
    out = []
    for b in s.encode("utf-8", "surrogatepass"):
        if b in (0x22, 0x5C):
            out.append("\\" + chr(b))
        elif b == 0x0A:
            out.append("\\n")
        elif 0x20 <= b < 0x7F and b != 0x3F:
            out.append(chr(b))
        else:
            out.append(f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def unquote(text: str) -> bytes:
    """The bytes of a host IR string literal's body, between its quotes (quote's inverse)."""
    out, k = bytearray(), 0
    while k < len(text):
        ch = text[k]
        if ch != "\\":
            out += ch.encode("utf-8", "surrogatepass")
            k += 1
        elif text[k + 1] == "n":
            out.append(0x0A)
            k += 2
        elif text[k + 1] in "01234567":
            out.append(int(text[k + 1:k + 4], 8))
            k += 4
        else:
            out += text[k + 1].encode()
            k += 2
    return bytes(out)


# ---- the body ----------------------------------------------------------------------------------
def call(result: str | None, op: str, operands: Sequence[str]) -> str:
    """`%r = call "ns::op.overload" (operands)`; without a result when `result` is None."""
    return ("" if result is None else f"{result} = ") + f"call {quote(op)} ({', '.join(operands)})"


def launch(kernel: int, grid: Sequence[str], operands: Sequence[str]) -> str:
    """`launch K grid(x, y, z) (operands)`: the spec's kernel K over a three-dimensional grid."""
    return f"launch {kernel} grid({', '.join(grid)}) ({', '.join(operands)})"


def arg(value: str, leaf: int) -> str:
    return f"{value} = arg {leaf}"


def state(value: str, index: int) -> str:
    return f"{value} = state {index}"


def ret(tree: str) -> str:
    return f"return {tree}"


def item(value: str, tensor: str) -> str:
    """`$N = item %t` (`$fN` for a float): the number in a one-element tensor, read on the host."""
    return f"{value} = item {tensor}"


def size(value: str, tensor: str, dim: int) -> str:
    return f"{value} = size {tensor}, {dim}"


def sym(value: str, op: str, a: str, b: str | None = None) -> str:
    """`$N = op a[, b]`: integer (add, mul, floordiv, ...) and float (fadd, fsqrt, itof, ...) ops, and
    the leaf reads `int K` / `float K` (a = the leaf's index)."""
    return f"{value} = {op} {a}" + ("" if b is None else f", {b}")


def check(value: str, message: str) -> str:
    """`check $N, "..."`: a RuntimeError with `message` when $N is 0 (a runtime assertion)."""
    return f"check {value}, {quote(message)}"


def expect(value: str, message: str) -> str:
    """`expect $N, "..."`: when $N is 0 the call took another branch than the traced one."""
    return f"expect {value}, {quote(message)}"


# ---- the header --------------------------------------------------------------------------------
def guard(field: str, op: str, rhs) -> str:
    """`guard <field> <op> <rhs>`: one field of the call (guard_fields.field) against a literal or
    another field."""
    return f"guard {field} {op} {rhs}"


def guard_expr(expr: str) -> str:
    """`guard expr "..."`: an integer expression over fields that must be nonzero (ir/expr.h)."""
    return f'guard expr "{expr}"'


def graph_off(why: str) -> str:
    return f"graph off {quote(why)}"


def graph_reads(where: str) -> str:
    """`graph reads "..."`: where the program first reads a device value on the host (its CUDA graphs
    split there, or none: csrc/runtime/graphs/spec_graphs.h)."""
    return f"graph reads {quote(where)}"


def kernel(index: int, ck, cubin_path: str, nan_padding: tuple = ()) -> str:
    """`kernel K "name" "path.cubin" "ptr,i32,..." warps W ctas C shared S gscratch SIZE ALIGN
    pscratch SIZE ALIGN pdl 0 coop 0`: a compiled Triton kernel (triton_specialize.
    CompiledTritonKernel) with the C type of each runtime parameter in launch order; then, per
    tensor descriptor the kernel lowered to TMA (a `tmadesc` parameter), `tma SWIZZLE ELEM_SIZE
    ELEM_TYPE FP4 NAN BLOCK...` from its metadata, NAN from `nan_padding` (per descriptor, in order:
    the descriptor's padding is "nan")."""
    ctypes = ",".join(p.ctype for p in ck.params if p.arg_index >= 0)
    tma = ""
    for d, meta in enumerate(ck.tensordesc_meta):
        if meta is not None:
            nan = int(bool(nan_padding[d])) if d < len(nan_padding) else 0
            tma += (f" tma {meta['swizzle']} {meta['elem_size']} {meta['elem_type']} {int(bool(meta['fp4_padded']))} "
                    f"{nan} " + " ".join(str(int(b)) for b in meta["block_size"]))
    return (f"kernel {index} {quote(ck.name)} {quote(cubin_path)} {quote(ctypes)} warps {ck.num_warps} "
            f"ctas {ck.num_ctas} shared {ck.shared} gscratch {ck.global_scratch_size} {ck.global_scratch_align} "
            f"pscratch {ck.profile_scratch_size} {ck.profile_scratch_align} pdl {int(bool(ck.launch_pdl))} "
            f"coop {int(bool(ck.launch_cooperative_grid))}{tma}")


def spec_open(structure: str) -> str:
    """The first line of a spec: `spec 0 structure "..." {` (its argument structure, flatten.h)."""
    return f"spec 0 structure {quote(structure)} {{"


def writes(leaves) -> str:
    """`writes K, K`: the user tensor leaves the body writes in place, ascending."""
    return "writes " + ", ".join(str(k) for k in sorted(leaves))
