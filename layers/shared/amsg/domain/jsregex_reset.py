"""JavaScript clears a repeated group's captures at every iteration; Python keeps the last value set.

So after ``(?:(a)|b)+`` matches ``ab``, group 1 is ``undefined`` in JavaScript (the last iteration took ``b``)
and ``'a'`` in Python. The rewrite (:mod:`amsg.domain.jsregex_repeat`) puts a hidden empty capture at the start
of every iteration of such a repeat; a capture whose last value starts before the last iteration of an
enclosing repeat did not take part in that iteration, and :class:`JsPattern` reports it as ``None``.

That position test is exact when the capture is not inside a look-around (which may capture outside its
iteration), the repeat is not inside a look-behind (which runs right to left), nothing refers back to the capture
(the match itself would differ), and an empty capture cannot be taken both where an iteration starts and where
one ends (then an empty capture at the last iteration's start could belong to either; otherwise the tree says
which). :func:`reset_captures` refuses the other cases with a ``ValueError``, the documented 400.
"""

from __future__ import annotations

from typing import Any

from amsg.domain.jsregex_ast import Alt, Group, Node, Quant, nullable

__all__ = ["JsMatch", "JsPattern", "reset_captures"]

_OPTIONAL = "a repeated group must not contain optional captures"


def reset_captures(atom: Node, referenced: set[int], in_lookbehind: bool) -> list[tuple[int, bool]]:
    """Captures of the repeated ``atom`` that an iteration may leave unset (JavaScript then clears them), each
    with what an empty capture exactly at the last iteration's start means: True if it can only have been taken
    at an iteration's start (it belongs to that iteration), False if only at an iteration's end (the one before).
    """
    found: list[_Found] = []
    _collect(atom, _Context(conditional=False, in_look=False, at_start=True, at_end=True), found)
    if found and in_lookbehind:
        raise ValueError(f"{_OPTIONAL} inside a look-behind (JS resets them per iteration)")
    captures: dict[int, bool] = {}
    for capture in found:
        if capture.in_look:
            raise ValueError(f"{_OPTIONAL} inside a look-around (JS resets them per iteration)")
        if capture.at_start and capture.at_end:
            raise ValueError(f"{_OPTIONAL} that can match empty at both ends of an iteration (JS resets them)")
        if capture.group.index in referenced:
            raise ValueError(f"{_OPTIONAL} that are backreferenced (JS resets them per iteration)")
        captures[capture.group.index] = capture.at_start
    return sorted(captures.items())


class _Context:
    """Where a node sits in the repeated atom: under an optional part, in a look-around, and whether everything
    before (after) it in the iteration can match empty."""

    __slots__ = ("at_end", "at_start", "conditional", "in_look")

    def __init__(self, *, conditional: bool, in_look: bool, at_start: bool, at_end: bool) -> None:
        self.conditional = conditional
        self.in_look = in_look
        self.at_start = at_start
        self.at_end = at_end

    def but(self, **changes: bool) -> _Context:
        values = {name: getattr(self, name) for name in self.__slots__}
        return _Context(**{**values, **changes})


class _Found:
    __slots__ = ("at_end", "at_start", "group", "in_look")

    def __init__(self, group: Group, context: _Context) -> None:
        empty = nullable(group.body)
        self.group = group
        self.in_look = context.in_look
        self.at_start = empty and context.at_start  # it may be captured empty where an iteration starts
        self.at_end = empty and context.at_end


def _collect(node: Node, context: _Context, out: list[_Found]) -> None:
    match node:
        case Group():
            if node.kind == "cap" and context.conditional:
                out.append(_Found(node, context))
            inner = context.but(
                conditional=context.conditional or node.kind in ("nla", "nlb"),
                in_look=context.in_look or node.kind not in ("cap", "nc"),
            )
            _collect(node.body, inner, out)
        case Alt():
            inner = context.but(conditional=context.conditional or len(node.branches) > 1)
            for branch in node.branches:
                _collect_sequence(branch, inner, out)
        case Quant():
            _collect(node.atom, context.but(conditional=context.conditional or node.lo == 0), out)


def _collect_sequence(items: list[Node], context: _Context, out: list[_Found]) -> None:
    empty = [nullable(item) for item in items]
    after = [True] * (len(items) + 1)  # after[k]: every item from k on can match empty
    for k in range(len(items) - 1, -1, -1):
        after[k] = after[k + 1] and empty[k]
    before = context.at_start
    for k, item in enumerate(items):
        if isinstance(item, Group | Alt | Quant):  # nothing else holds a capture
            _collect(item, context.but(at_start=before, at_end=context.at_end and after[k + 1]), out)
        before = before and empty[k]


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
    """A compiled ``splitPattern``: ``regex``'s search, with captures as JavaScript reports them.

    Without hidden markers a ``regex`` match already holds JavaScript's captures and is returned as it is (the
    split loop calls this once per segment).
    """

    __slots__ = ("_plain", "_regex", "_resets", "groups")

    def __init__(self, compiled: Any, groups: int, resets: dict[int, list[tuple[int, bool]]]) -> None:
        self._regex = compiled
        # capture -> (hidden marker of a repeat that clears it, whether an empty capture at its start is its own)
        self._resets = resets
        self._plain = not resets and compiled.groups == groups
        self.groups = groups

    def search(self, text: str, pos: int = 0, *, timeout: float | None = None) -> Any:
        """A match (``start()``, ``end()``, ``group()``, ``groups()``) or None."""
        match = self._regex.search(text, pos, timeout=timeout)
        return match if match is None or self._plain else self._wrap(match)

    def match(self, text: str, pos: int = 0, *, timeout: float | None = None) -> Any:
        match = self._regex.match(text, pos, timeout=timeout)
        return match if match is None or self._plain else self._wrap(match)

    def _wrap(self, match: Any) -> JsMatch:
        values = list(match.groups()[: self.groups])
        for index, markers in self._resets.items():
            if values[index - 1] is not None and any(_before(match, index, *marker) for marker in markers):
                values[index - 1] = None
        return JsMatch(match, tuple(values))


def _before(match: Any, index: int, marker: int, empty_at_start_is_own: bool) -> bool:
    """Whether capture ``index`` was taken before the last iteration marked by ``marker`` began."""
    start, end, iteration = match.start(index), match.end(index), match.start(marker)
    if start == end == iteration:
        return not empty_at_start_is_own
    return bool(start < iteration)
