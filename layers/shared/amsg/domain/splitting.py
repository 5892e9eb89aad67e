"""Message segmentation: one LLM reply becomes several pushes (see docs/compatibility.md).

Patterns are JavaScript regex sources (translated by :mod:`amsg.domain.jsregex`), applied with JavaScript
``String.prototype.split`` semantics — not Python's ``re.split``, which splits on empty matches at the start and
end. Each piece is the trimmed text plus every participating capture of the separator that follows it, so a
captured separator (the default punctuation) stays with its sentence, an uncaptured one vanishes, and a
group that did not take part (``undefined`` in JavaScript's ``split`` result) adds nothing, like an empty one.
A list of patterns is a cascade: every chunk produced by pattern k is split again by pattern k+1.

Every match runs under one CPU budget per message (:data:`SPLIT_BUDGET_S`): a pattern that exhausts it — or a
stored pattern the translator now refuses — fails the delivery *permanently* (:class:`SplitPatternFailure`), since
retrying the same text with the same pattern cannot succeed (docs/decisions.md, "User-supplied regexes").
"""

from __future__ import annotations

import re
import time
from typing import Any

from amsg.domain.jsregex import compile_js_pattern
from amsg.domain.jsvalues import js_trim
from amsg.failures import DeliveryFailure

__all__ = ["DEFAULT_SPLIT_PATTERN", "SPLIT_BUDGET_S", "SplitPatternFailure", "js_split", "split_message"]

# CPU time all matches of one message may take: a linear pattern splits megabytes in far less.
SPLIT_BUDGET_S = 0.5
SPLIT_PATTERN_FAILED = "SPLIT_PATTERN_FAILED"


class SplitPatternFailure(DeliveryFailure, ValueError):
    """The message's ``splitPattern`` cannot split it: over the CPU budget, or not a pattern we accept."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code=SPLIT_PATTERN_FAILED, permanent=True)


class _Deadline:
    __slots__ = ("at",)

    def __init__(self, budget_s: float) -> None:
        self.at = time.monotonic() + budget_s

    def remaining(self) -> float:
        left = self.at - time.monotonic()
        if left <= 0:
            raise TimeoutError("splitPattern budget exhausted")
        return left


# Runs of sentence-ending punctuation, captured so each run stays with the sentence before it.
DEFAULT_SPLIT_PATTERN = "([。！？!?]+)"
# The same pattern in Python's ``re``: one captured run of a class of five literal characters.
_DEFAULT_RUNS = re.compile(DEFAULT_SPLIT_PATTERN)


def js_split(text: str, pattern: Any, deadline: _Deadline | None = None) -> list[str | None]:
    """``text.split(regex)`` as JavaScript computes it (no limit); ``None`` stands for ``undefined``.

    Captures of each separator are inserted after the piece before it. An empty match never splits at the
    position where the current piece starts (so never at index 0) and a match at the very end is never tried.
    ``pattern`` is what :func:`compile_js_pattern` returns (or a plain ``regex`` pattern); with a ``deadline`` every
    match runs under its remaining budget (``TimeoutError`` when spent).
    """
    deadline = deadline or _Deadline(SPLIT_BUDGET_S)
    size = len(text)
    if size == 0:
        return [] if pattern.match(text, timeout=deadline.remaining()) else [text]
    parts: list[str | None] = []
    start = 0  # where the current piece begins (JS `p`)
    pos = 0  # where the next match is tried (JS `q`)
    while pos < size:
        m = pattern.search(text, pos, timeout=deadline.remaining())
        if m is None or m.start() >= size:
            break
        if m.end() == start:
            # Empty match where the piece starts: JS advances one position without splitting.
            pos = m.start() + 1
            continue
        parts.append(text[start : m.start()])
        parts.extend(m.groups())
        start = pos = m.end()
    parts.append(text[start:])
    return parts


def _split_step(chunk: str, pattern: Any, deadline: _Deadline) -> list[str]:
    parts = js_split(chunk, pattern, deadline)
    stride = pattern.groups + 1
    out: list[str] = []
    for i in range(0, len(parts), stride):
        piece = js_trim(parts[i] or "")
        if not piece:
            continue  # a blank piece drops its separator too (`。。。` alone stays whole, see below)
        captures = parts[i + 1 : i + stride]
        out.append(piece + "".join(c for c in captures if c))
    # Nothing usable: keep the chunk as it was, so a later pattern in the cascade can still split it.
    return out or [chunk]


def _sources(split_pattern: str | list[str] | None) -> list[str]:
    if split_pattern is None:
        return [DEFAULT_SPLIT_PATTERN]
    if isinstance(split_pattern, str):
        return [split_pattern]
    if isinstance(split_pattern, list | tuple):
        if not split_pattern:
            return [DEFAULT_SPLIT_PATTERN]
        if not all(isinstance(item, str) for item in split_pattern):
            raise ValueError("splitPattern items must be strings")
        return list(split_pattern)
    raise ValueError("splitPattern must be a string, a list of strings or null")


def _default_split(text: str) -> list[str]:
    """The default split (no ``splitPattern``), what almost every delivery runs, without the translator, the
    JavaScript split loop and the budget's clock: the same segments as the general path for every text
    (tests/unit/test_splitting.py compares the two), for a fraction of the CPU. The default pattern never matches
    empty text, and for such a pattern Python's ``re.split`` cuts where JavaScript's ``split`` does and returns
    the capture after each piece; one character class, it matches in linear time, so it needs no budget."""
    parts = _DEFAULT_RUNS.split(text)  # piece, separator, piece, ..., piece
    out: list[str] = []
    for index in range(0, len(parts), 2):
        piece = js_trim(parts[index])
        if piece:  # a blank piece drops its separator too, as in _split_step
            out.append(piece + parts[index + 1] if index + 1 < len(parts) else piece)
    return out or [text]


def split_message(text: str, split_pattern: str | list[str] | None, *, budget_s: float = SPLIT_BUDGET_S) -> list[str]:
    """Segments to push for ``text``; ``split_pattern`` None or ``[]`` means the default punctuation split.

    Raises :class:`SplitPatternFailure` (a permanent delivery failure, also a ``ValueError``) for a pattern the
    translator refuses — validation refuses those at schedule/update time, so only data written around the API —
    and for matching that exceeds ``budget_s`` of CPU time.
    """
    if split_pattern is None or (isinstance(split_pattern, list | tuple) and not split_pattern):
        return _default_split(text)
    try:
        patterns = [compile_js_pattern(source) for source in _sources(split_pattern)]
    except ValueError as exc:
        raise SplitPatternFailure(f"{SPLIT_PATTERN_FAILED}: splitPattern is not a pattern this server runs") from exc
    deadline = _Deadline(budget_s)
    chunks = [text]
    try:
        for pattern in patterns:
            chunks = [segment for chunk in chunks for segment in _split_step(chunk, pattern, deadline)]
    except TimeoutError:
        raise SplitPatternFailure(
            f"{SPLIT_PATTERN_FAILED}: splitPattern took more than {budget_s:g} s of CPU time on this message"
        ) from None
    return chunks or [text]
