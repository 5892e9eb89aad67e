r"""Refusing ``splitPattern``s that backtrack catastrophically (see docs/decisions.md, "User-supplied regexes").

A backtracking engine takes exponential time when a repeated subpattern can match the same text in more than
one way. Two shapes cause nearly every real case, and both are visible in the syntax tree:

* a repeat of variable count inside a repeat — ``(a+)+``, ``(?:a+)+b``, ``(x+x+)+y``, ``(.*a){20}``; a repeat of
  fixed count nests harmlessly (``(?:。{2}){2}``, ``(?:\d{3},)+``): it matches its text one way only;
* a repeated alternation whose branches can start with the same character — ``(a|aa)+``, ``(\w|_)*``.

:func:`check_backtracking` walks a tree once and refuses both (a ``ValueError``: validation turns it into the
documented 400). :mod:`amsg.domain.jsregex` walks the pattern as written and as rewritten for JavaScript's
empty-repeat rule, which spells out the alternatives hidden in ``(?:a?a?)+`` (``(?:aa?|a)*``). It is a first
line only: polynomial shapes such as ``\s*\s*\s*x`` remain, so every match also runs under a CPU budget
(:mod:`amsg.domain.splitting`).
"""

from __future__ import annotations

from amsg.domain.jsregex_ast import (
    MAX_CODE_POINT,
    Alt,
    Assert,
    BackRef,
    Char,
    Class,
    Group,
    Node,
    Quant,
    complement_ranges,
    nullable,
)

_ANY = [(0, MAX_CODE_POINT)]
_Ranges = list[tuple[int, int]]


def check_backtracking(tree: Node) -> None:
    """Raise ``ValueError`` if ``tree`` holds a variable repeat in a repeat or an ambiguous repeated alternation."""
    _walk(tree, in_repeat=False)


def _repeats(quant: Quant) -> bool:
    return quant.hi is None or quant.hi > 1


def _walk(node: Node, *, in_repeat: bool) -> None:
    match node:
        case Quant():
            repeats = _repeats(node)
            if repeats and in_repeat and node.lo != node.hi:
                raise ValueError("a repeat of variable count inside a repeat (catastrophic backtracking)")
            _walk(node.atom, in_repeat=in_repeat or repeats)
        case Group():
            _walk(node.body, in_repeat=in_repeat)
        case Alt():
            if in_repeat and _ambiguous(node):
                raise ValueError("alternatives inside a repeat must not start with the same character")
            for branch in node.branches:
                for item in branch:
                    _walk(item, in_repeat=in_repeat)


def _ambiguous(alt: Alt) -> bool:
    seen: _Ranges = []
    for branch in alt.branches:
        first = _first_of_sequence(branch)
        if _overlaps(seen, first):
            return True
        seen = seen + first
    return False


def _first_of_sequence(items: list[Node]) -> _Ranges:
    out: _Ranges = []
    for item in items:
        out += _first(item)
        if not nullable(item):
            break
    return out


def _first(node: Node) -> _Ranges:
    """Characters a match of ``node`` can start with (an over-approximation)."""
    match node:
        case Char():
            return [(node.cp, node.cp)]
        case Class():
            return complement_ranges(node.ranges) if node.negated else list(node.ranges)
        case Assert():
            return []
        case BackRef():
            return list(_ANY)
        case Quant():
            return _first(node.atom)
        case Group():
            return _first(node.body) if node.kind in ("cap", "nc") else []
        case Alt():
            return [r for branch in node.branches for r in _first_of_sequence(branch)]
    return list(_ANY)


def _overlaps(a: _Ranges, b: _Ranges) -> bool:
    return any(lo1 <= hi2 and lo2 <= hi1 for lo1, hi1 in a for lo2, hi2 in b)
