"""JavaScript clears a repeated group's captures at every iteration; Python keeps the last value set.

So after ``(?:(a)|b)+`` matches ``ab``, group 1 is ``undefined`` in JavaScript (the last iteration took ``b``)
and ``'a'`` in Python. The rewrite (:mod:`amsg.domain.jsregex_repeat`) puts a hidden empty capture at the start
of every iteration of such a repeat; a capture whose last value starts before the last iteration of an
enclosing repeat did not take part in that iteration, and :class:`JsPattern` reports it as ``None``.

That position test is exact when the capture cannot match empty, is not inside a look-around (which may capture
outside its iteration), the repeat is not inside a look-behind (which runs right to left), and nothing refers
back to the capture (the match itself would differ). :func:`reset_captures` refuses the other cases with a
``ValueError``, the documented 400.
"""

from __future__ import annotations

from typing import Any

from amsg.domain.jsregex_ast import Alt, Group, Node, Quant, nullable

__all__ = ["JsMatch", "JsPattern", "reset_captures"]

_OPTIONAL = "a repeated group must not contain optional captures"


def reset_captures(atom: Node, referenced: set[int], in_lookbehind: bool) -> list[int]:
    """Captures of the repeated ``atom`` that an iteration may leave unset (JavaScript then clears them)."""
    found: list[tuple[Group, bool]] = []
    _collect(atom, conditional=False, in_look=False, out=found)
    if found and in_lookbehind:
        raise ValueError(f"{_OPTIONAL} inside a look-behind (JS resets them per iteration)")
    for group, in_look in found:
        if in_look:
            raise ValueError(f"{_OPTIONAL} inside a look-around (JS resets them per iteration)")
        if nullable(group.body):
            raise ValueError(f"{_OPTIONAL} that can match empty (JS resets them per iteration)")
        if group.index in referenced:
            raise ValueError(f"{_OPTIONAL} that are backreferenced (JS resets them per iteration)")
    return sorted({group.index for group, _ in found})


def _collect(node: Node, *, conditional: bool, in_look: bool, out: list[tuple[Group, bool]]) -> None:
    match node:
        case Group():
            if node.kind == "cap" and conditional:
                out.append((node, in_look))
            inner = conditional or node.kind in ("nla", "nlb")
            _collect(node.body, conditional=inner, in_look=in_look or node.kind not in ("cap", "nc"), out=out)
        case Alt():
            inner = conditional or len(node.branches) > 1
            for branch in node.branches:
                for item in branch:
                    _collect(item, conditional=inner, in_look=in_look, out=out)
        case Quant():
            _collect(node.atom, conditional=conditional or node.lo == 0, in_look=in_look, out=out)


class JsMatch:
    """A match whose captures are JavaScript's (the hidden iteration markers left out)."""

    __slots__ = ("_match", "_values")

    def __init__(self, match: Any, values: tuple[str | None, ...]) -> None:
        self._match = match
        self._values = values

    def start(self) -> int:
        return int(self._match.start())

    def end(self) -> int:
        return int(self._match.end())

    def span(self) -> tuple[int, int]:
        return self.start(), self.end()

    def group(self, index: int = 0) -> str | None:
        return str(self._match.group(0)) if index == 0 else self._values[index - 1]

    def groups(self) -> tuple[str | None, ...]:
        return self._values


class JsPattern:
    """A compiled ``splitPattern``: ``regex``'s search, with captures as JavaScript reports them."""

    __slots__ = ("_regex", "_resets", "groups")

    def __init__(self, compiled: Any, groups: int, resets: dict[int, list[int]]) -> None:
        self._regex = compiled
        self._resets = resets  # capture -> hidden markers of the repeats that clear it
        self.groups = groups

    def search(self, text: str, pos: int = 0, *, timeout: float | None = None) -> JsMatch | None:
        return self._wrap(self._regex.search(text, pos, timeout=timeout))

    def match(self, text: str, pos: int = 0, *, timeout: float | None = None) -> JsMatch | None:
        return self._wrap(self._regex.match(text, pos, timeout=timeout))

    def _wrap(self, match: Any) -> JsMatch | None:
        if match is None:
            return None
        values = list(match.groups()[: self.groups])
        for index, markers in self._resets.items():
            if values[index - 1] is not None and any(match.start(index) < match.start(m) for m in markers):
                values[index - 1] = None
        return JsMatch(match, tuple(values))
