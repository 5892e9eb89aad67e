"""The syntax tree of a JavaScript regex source and the analyses run on it (see :mod:`amsg.domain.jsregex`).

Kept apart from the parser/emitter so both stay small, and so :mod:`amsg.domain.regex_safety` can walk the
same tree.
"""

from __future__ import annotations

_Ranges = list[tuple[int, int]]

MAX_CODE_POINT = 0x10FFFF


def complement_ranges(ranges: _Ranges) -> _Ranges:
    """The code points (up to U+10FFFF) in none of ``ranges``."""
    out: _Ranges = []
    nxt = 0
    for lo, hi in sorted(ranges):
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = max(nxt, hi + 1)
    if nxt <= MAX_CODE_POINT:
        out.append((nxt, MAX_CODE_POINT))
    return out


# --- AST ---------------------------------------------------------------------------------------------------
# Plain slotted classes rather than dataclasses: building dataclasses costs milliseconds of cold start.


class Char:
    __slots__ = ("cp",)

    def __init__(self, cp: int) -> None:
        self.cp = cp


class Class:
    __slots__ = ("negated", "ranges")

    def __init__(self, ranges: _Ranges, negated: bool = False) -> None:
        self.ranges = ranges
        self.negated = negated


class Assert:
    __slots__ = ("kind",)

    def __init__(self, kind: str) -> None:
        self.kind = kind  # "start" | "end" | "b" | "B"


class Alt:
    __slots__ = ("branches",)

    def __init__(self, branches: list[list[Node]]) -> None:
        self.branches = branches


class Group:
    __slots__ = ("body", "index", "kind", "name")

    def __init__(self, kind: str, body: Alt, index: int = 0, name: str | None = None) -> None:
        self.kind = kind  # "cap" | "nc" | "la" | "nla" | "lb" | "nlb"
        self.body = body
        self.index = index
        self.name = name


class BackRef:
    __slots__ = ("index", "settable")

    def __init__(self, index: int, settable: bool) -> None:
        self.index = index
        self.settable = settable  # False: the group closes after the reference, so JS always sees it unset


class Quant:
    __slots__ = ("atom", "hi", "lazy", "lo")

    def __init__(self, atom: Node, lo: int, hi: int | None, lazy: bool) -> None:
        self.atom = atom
        self.lo = lo
        self.hi = hi
        self.lazy = lazy


Node = Char | Class | Assert | Alt | Group | BackRef | Quant


# --- analysis ------------------------------------------------------------------------------------------------


def nullable(node: Node) -> bool:
    match node:
        case Char() | Class():
            return False
        case Assert() | BackRef():
            return True
        case Quant():
            return node.lo == 0 or nullable(node.atom)
        case Alt():
            return any(all(nullable(item) for item in branch) for branch in node.branches)
        case Group():
            return node.kind not in ("cap", "nc") or nullable(node.body)
    return True
