"""Message segmentation: one LLM reply becomes several pushes (see docs/compatibility.md).

Patterns are JavaScript regex sources (translated by :mod:`amsg.domain.jsregex`), applied with JavaScript
``String.prototype.split`` semantics — not Python's ``re.split``, which splits on empty matches at the start and
end. Each piece is the trimmed text plus every participating capture of the separator that follows it, so a
captured separator (the default punctuation) stays with its sentence, an uncaptured one vanishes, and a
group that did not take part adds nothing. A list of patterns is a cascade: every chunk produced by pattern
k is split again by pattern k+1.
"""

from __future__ import annotations

import re

from amsg.domain.jsregex import compile_js_pattern
from amsg.domain.jsvalues import js_trim

__all__ = ["DEFAULT_SPLIT_PATTERN", "js_split", "split_message"]

# Runs of sentence-ending punctuation, captured so each run stays with the sentence before it.
DEFAULT_SPLIT_PATTERN = "([。！？!?]+)"


def js_split(text: str, pattern: re.Pattern[str]) -> list[str | None]:
    """``text.split(regex)`` as JavaScript computes it (no limit); ``None`` stands for ``undefined``.

    Captures of each separator are inserted after the piece before it. An empty match never splits at the
    position where the current piece starts (so never at index 0) and a match at the very end is never tried.
    """
    size = len(text)
    if size == 0:
        return [] if pattern.match(text) else [text]
    parts: list[str | None] = []
    start = 0  # where the current piece begins (JS `p`)
    pos = 0  # where the next match is tried (JS `q`)
    while pos < size:
        m = pattern.search(text, pos)
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


def _split_step(chunk: str, pattern: re.Pattern[str]) -> list[str]:
    parts = js_split(chunk, pattern)
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


def split_message(text: str, split_pattern: str | list[str] | None) -> list[str]:
    """Segments to push for ``text``; ``split_pattern`` None or ``[]`` means the default punctuation split.

    Raises ``ValueError`` for a pattern the translator rejects; validation refuses such patterns at
    schedule/update time, so this only happens for data written around the API.
    """
    patterns = [compile_js_pattern(source) for source in _sources(split_pattern)]
    chunks = [text]
    for pattern in patterns:
        chunks = [segment for chunk in chunks for segment in _split_step(chunk, pattern)]
    return chunks or [text]
