"""Hostile request bodies for timing properties: a short prefix and a repeated unit, grown to any size.

Each shape targets a check that once scanned (or could scan) the body more than once: unterminated strings full
of escaped quotes, deep or wide brackets, long numbers, escapes, whitespace. The time per byte of every body check
must stay flat as the body grows (tests/unit/test_linear_time.py, ``python -m bench hostile``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from hypothesis import strategies as st

# (prefix, unit): the body is prefix + unit * k
SHAPES: list[tuple[str, str]] = [
    ("[" * 70 + '"', '\\"'),  # the fuzzer's reproducer: an unterminated string of escaped quotes after deep nesting
    ("[" * 70 + '"', '\\"\\\\'),
    ('{"iv":"', '\\"'),
    ("", '"\\"'),  # every unit opens a string again
    ("", '"a",'),
    ("", "["),  # deep nesting (refused by the depth limit)
    ("", '{"a":'),
    ("", "[],"),
    ('{"encryptedData":', "1"),  # a huge number
    ('{"iv":"', "\\u0000"),
    ("", " \t\n\r"),
    ("[" * 70, '"x\\\\",'),
]

shapes = st.sampled_from(SHAPES)
units = st.text(alphabet='[]{}",:\\ a1', min_size=1, max_size=6)
hostile_shapes = st.one_of(shapes, st.tuples(st.sampled_from(["", "[" * 70, "[" * 70 + '"']), units))


def grow(shape: tuple[str, str], size: int) -> str:
    prefix, unit = shape
    return prefix + unit * max(1, (size - len(prefix)) // len(unit))


def seconds_per_byte(check: Callable[[str], object], body: str, *, repeats: int = 3) -> float:
    """Best of ``repeats`` runs (the least disturbed by other load), per byte of ``body``."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        check(body)
        best = min(best, time.perf_counter() - start)
    return best / len(body.encode("utf-8"))
