"""Emitting the syntax tree of a JavaScript regex (:mod:`amsg.domain.jsregex`) as a Python ``regex`` source.

Captures are plain numbered groups, unless the JS empty-repeat rewrite (:mod:`amsg.domain.jsregex_repeat`)
copied a group, dropped every use of one (a group that can never take part in JS) or added hidden iteration
markers (:mod:`amsg.domain.jsregex_reset`). Then every capture is a
named group and a ``(?(DEFINE)…)`` prefix declares them all in JavaScript's order: ``regex`` gives every use of
a name one number, fixed by its first appearance, so ``m.groups()`` keeps JavaScript's numbering.
"""

from __future__ import annotations

from collections import Counter

from amsg.domain.jsregex_ast import MAX_CODE_POINT, Alt, Assert, BackRef, Char, Class, Group, Node, Quant

__all__ = ["emit"]

_Ranges = list[tuple[int, int]]

_WORD_CLASS = "[0-9A-Z_a-z]"
_WORD_BOUNDARY = f"(?:(?<={_WORD_CLASS})(?!{_WORD_CLASS})|(?<!{_WORD_CLASS})(?={_WORD_CLASS}))"
_NOT_WORD_BOUNDARY = f"(?:(?<={_WORD_CLASS})(?={_WORD_CLASS})|(?<!{_WORD_CLASS})(?!{_WORD_CLASS}))"
_ASSERTIONS = {"start": "\\A", "end": "\\Z", "b": _WORD_BOUNDARY, "B": _NOT_WORD_BOUNDARY}
_GROUP_OPEN = {"nc": "(?:", "la": "(?=", "nla": "(?!", "lb": "(?<=", "nlb": "(?<!"}


def emit(tree: Alt, group_count: int, js_names: dict[str, int], *, named: bool = False) -> str:
    """The Python ``regex`` source for ``tree``, whose captures are numbered 1..``group_count``; ``named``
    forces named groups (hidden captures after JavaScript's must keep their numbers)."""
    uses = Counter[int]()
    _count_captures(tree, uses)
    if not named and all(uses[index] == 1 for index in range(1, group_count + 1)):
        return _Emitter({}).node(tree)
    names = _group_names(group_count, js_names)
    declared = "".join(f"(?P<{names[index]}>)" for index in range(1, group_count + 1))
    return f"(?(DEFINE){declared})" + _Emitter(names).node(tree)


def _count_captures(node: Node, uses: Counter[int]) -> None:
    match node:
        case Group():
            if node.kind == "cap":
                uses[node.index] += 1
            _count_captures(node.body, uses)
        case Alt():
            for branch in node.branches:
                for item in branch:
                    _count_captures(item, uses)
        case Quant():
            _count_captures(node.atom, uses)


def _group_names(group_count: int, js_names: dict[str, int]) -> dict[int, str]:
    """A Python name per group: its JS name when Python accepts it, else ``g<N>`` (underscored clear of JS names)."""
    names = {index: name for name, index in js_names.items() if name.isidentifier()}
    prefix = "g"
    while any(name.startswith(prefix) for name in js_names):
        prefix = "_" + prefix
    for index in range(1, group_count + 1):
        names.setdefault(index, f"{prefix}{index}")
    return names


def cp_text(cp: int) -> str:
    """One code point as ``regex`` source: itself when alphanumeric ASCII, else an escape."""
    ch = chr(cp)
    if ch.isascii() and (ch.isalnum() or ch == "_"):
        return ch
    if cp <= 0xFF:
        return f"\\x{cp:02x}"
    if cp <= 0xFFFF:
        return f"\\u{cp:04x}"
    return f"\\U{cp:08x}"


def _class_text(ranges: _Ranges, negated: bool) -> str:
    if not ranges:
        return f"[\\x00-{cp_text(MAX_CODE_POINT)}]" if negated else "(?!)"
    body = "".join(cp_text(lo) if lo == hi else f"{cp_text(lo)}-{cp_text(hi)}" for lo, hi in ranges)
    return f"[^{body}]" if negated else f"[{body}]"


def _quantifier(lo: int, hi: int | None) -> str:
    if (lo, hi) == (0, None):
        return "*"
    if (lo, hi) == (1, None):
        return "+"
    if (lo, hi) == (0, 1):
        return "?"
    if hi is None:
        return f"{{{lo},}}"
    return f"{{{lo}}}" if lo == hi else f"{{{lo},{hi}}}"


class _Emitter:
    __slots__ = ("names",)

    def __init__(self, names: dict[int, str]) -> None:
        self.names = names  # empty: numbered groups (JS names kept where Python accepts them)

    def node(self, node: Node) -> str:
        match node:
            case Char():
                return cp_text(node.cp)
            case Class():
                return _class_text(node.ranges, node.negated)
            case Assert():
                return _ASSERTIONS[node.kind]
            case Alt():
                return "|".join("".join(self.node(item) for item in branch) for branch in node.branches)
            case Group():
                return self._group_open(node) + self.node(node.body) + ")"
            case BackRef():
                return f"(?:(?({node.index})\\{node.index}))" if node.settable else "(?:)"
            case Quant():
                inner = self.node(node.atom)
                if not isinstance(node.atom, Char | Class | Group):
                    inner = f"(?:{inner})"
                return inner + _quantifier(node.lo, node.hi) + ("?" if node.lazy else "")
        raise AssertionError(f"unknown node {node!r}")

    def _group_open(self, group: Group) -> str:
        if group.kind != "cap":
            return _GROUP_OPEN[group.kind]
        if self.names:
            return f"(?P<{self.names[group.index]}>"
        return f"(?P<{group.name}>" if group.name and group.name.isidentifier() else "("
