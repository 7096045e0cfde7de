"""The structure string (python/bindings/flatten.h) read on the Python side, piece by piece: names
(after ';', and after '{' or ',' up to '=') and str constants (`s<len>:` then len bytes) are kept
whole, so no user text is read as a code."""
from __future__ import annotations

import re
from typing import Iterator

# A spec's structure line in host IR: the text before the literal, and the literal's body.
STRUCTURE_LINE = re.compile(r'^(\s*spec \d+ structure )"((?:[^"\\]|\\.)*)"', re.M)


def pieces(structure: bytes) -> Iterator[tuple[str, bytes, int | None]]:
    """(kind, bytes, number) for each piece of `structure`, in order; the bytes put back together
    are the string. Kinds: "name" (with its ';', '{' or ',' and its '='), "str", "object" (`c<N>`
    a class or `e<N>` an enum member, N its number in the object table), "class" (`<N`, a
    registered class's number before its items), "settings" (the `@...` suffix, always last),
    "code" (one character of any other code)."""
    k, n = 0, len(structure)

    def digits(at: int) -> int:
        end = at
        while end < n and 0x30 <= structure[end] <= 0x39:
            end += 1
        return end

    while k < n:
        ch = structure[k:k + 1]
        if ch == b";" or (ch in (b"{", b",") and structure[k + 1:k + 2] not in (b"}", b"")):
            end = structure.index(b"=", k) + 1  # a keyword's, dict key's or attribute's name
            yield "name", structure[k:end], None
        elif ch == b"s" and structure[k + 1:k + 2].isdigit():
            colon = structure.index(b":", k)
            end = colon + 1 + int(structure[k + 1:colon])
            yield "str", structure[k:end], None
        elif ch in (b"c", b"e", b"<") and structure[k + 1:k + 2].isdigit():
            end = digits(k + 1)
            yield "object" if ch != b"<" else "class", structure[k:end], int(structure[k + 1:end])
        elif ch == b"@":
            end = n
            yield "settings", structure[k:], None
        else:
            end = k + 1
            yield "code", ch, None
        k = end


def settings(spec_text: str) -> list[int]:
    """The numbers of the settings suffix (`@dtype.det` or `@dtype.det.cpu.cuda`) of the structure
    of a spec's host IR `spec_text`; [] at the defaults."""
    from .lowering import hir
    m = STRUCTURE_LINE.search(spec_text)
    for kind, text, _ in pieces(hir.unquote(m.group(2)) if m else b""):
        if kind == "settings":
            return [int(x) for x in text[1:].split(b".")]
    return []
