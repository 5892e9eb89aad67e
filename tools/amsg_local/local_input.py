"""Input checks of the local-only routes (``POST /_local/clock``, ``POST /_local/run-task``).

These routes take JSON a developer types by hand, so every odd value gets a 400 with a sentence saying what is
wrong, never an exception: ``Infinity``/``NaN`` tokens, numbers too large for a clock, fractions of a
millisecond, strings where numbers belong, bodies that are not JSON objects, unknown keys, oversize uuids.

The clock is confined to ``[1970-01-01T00:00:00Z, 9000-01-01T00:00:00Z)``: the engine turns "now" into
datetimes, ISO strings and next occurrences (a yearly recurrence adds a year), and Python's datetimes end in
year 9999; 1970 keeps times non-negative. The clock runs on from where it is put (it may pass the end by the
time that has run since), so a tick never meets a time it cannot represent.
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = [
    "CLOCK_MAX_MS",
    "CLOCK_MIN_MS",
    "TASK_UUID_MAX_CHARS",
    "BadLocalRequest",
    "clock_target",
    "parse_object",
    "task_uuid",
]

CLOCK_MIN_MS = 0  # 1970-01-01T00:00:00Z
CLOCK_MAX_MS = 221_845_392_000_000  # 9000-01-01T00:00:00Z, exclusive
TASK_UUID_MAX_CHARS = 256  # the longest task uuid the API accepts
_CLOCK_RANGE = "1970-01-01T00:00:00Z (0) .. 9000-01-01T00:00:00Z (221845392000000, exclusive)"


class BadLocalRequest(ValueError):
    """A local route's input is unusable; ``str(exc)`` is the sentence the client gets."""


def _no_constant(token: str) -> Any:
    raise BadLocalRequest(f"{token} is not a number JSON allows")


def parse_object(body: bytes, allowed: frozenset[str]) -> dict[str, Any]:
    """The body as a JSON object with only ``allowed`` keys (an empty body is ``{}``)."""
    if not body.strip():
        return {}
    try:
        value = json.loads(body, parse_constant=_no_constant)
    except BadLocalRequest:
        raise
    except (ValueError, RecursionError):  # bad UTF-8 or JSON, 4,300+ digit integers, deep nesting
        raise BadLocalRequest("the body is not valid JSON") from None
    if not isinstance(value, dict):
        raise BadLocalRequest("the body must be a JSON object")
    unknown = sorted(set(value) - allowed)
    if unknown:
        shown = ", ".join(repr(key[:40]) for key in unknown[:3])
        raise BadLocalRequest(f"unknown field(s) {shown}; allowed: {', '.join(sorted(allowed))}")
    return value


def _millis(value: Any, name: str) -> int:
    """A whole number of milliseconds (``1e3`` is fine, ``1.5``, ``"5"``, ``true`` and ``1e400`` are not)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadLocalRequest(f"{name} must be a number of milliseconds")
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise BadLocalRequest(f"{name} must be a finite whole number of milliseconds")
    return int(value)


def clock_target(request: dict[str, Any], now_ms: int) -> int | None:
    """Where ``{"advanceMs"}`` / ``{"nowMs"}`` / ``{"reset": true}`` moves the clock; None means reset.

    ``{}`` (or ``{"advanceMs": 0}``) reads the clock. The target must lie in the clock's range.
    """
    given = [key for key in ("advanceMs", "nowMs", "reset") if key in request]
    if len(given) > 1:
        raise BadLocalRequest(f"give one of advanceMs, nowMs, reset (got {', '.join(given)})")
    if "reset" in request:
        if not isinstance(request["reset"], bool):
            raise BadLocalRequest("reset must be true or false")
        return None if request["reset"] else now_ms
    if "nowMs" in request:
        target = _millis(request["nowMs"], "nowMs")
    else:
        advance = _millis(request.get("advanceMs", 0), "advanceMs")
        if advance == 0:
            return now_ms  # a read: the clock runs on from where it was put, maybe a little past the end
        target = now_ms + advance
    if not CLOCK_MIN_MS <= target < CLOCK_MAX_MS:
        raise BadLocalRequest(f"the clock must stay within {_CLOCK_RANGE}")
    return target


def task_uuid(request: dict[str, Any]) -> str:
    """The ``uuid`` of ``POST /_local/run-task``: a non-blank string the API could have stored."""
    value = request.get("uuid")
    if not isinstance(value, str) or not value.strip():
        raise BadLocalRequest("uuid must be a non-empty string")
    if len(value.strip()) > TASK_UUID_MAX_CHARS:
        raise BadLocalRequest(f"uuid is longer than {TASK_UUID_MAX_CHARS} characters")
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in value):
        raise BadLocalRequest("uuid contains control characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadLocalRequest("uuid contains a lone surrogate") from None
    return value.strip()
