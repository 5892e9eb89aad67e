"""Time-zone ids: accepted case-insensitively, stored in canonical case; unknown ids are rejected.

Canonical means the exact-case key of ``zoneinfo.available_timezones()``; aliases such as ``US/Eastern`` are
kept as they are (no resolution to ``America/New_York``). The lookup table is built on first use, not at
import, because scanning the zone database costs tens of milliseconds of cold start.
"""

from __future__ import annotations

import functools
import zoneinfo
from typing import Any

# Host artefacts that appear in the system zone directory but are not IANA ids.
_NOT_IANA = frozenset({"localtime", "posixrules"})


@functools.cache
def _lowercase_index() -> dict[str, str]:
    return {key.lower(): key for key in zoneinfo.available_timezones() if key not in _NOT_IANA}


def canonical_tz(value: Any) -> str | None:
    """The canonical id for ``value`` (case-insensitive match), or None when unknown or not a non-empty string."""
    if not isinstance(value, str) or not value:
        return None
    return _lowercase_index().get(value.lower())


def is_valid_tz(value: Any) -> bool:
    """Whether ``value`` names a known zone (any letter case)."""
    return canonical_tz(value) is not None
