"""Time formats of the wire: JS ``toISOString()`` strings and epoch milliseconds.

Parsing accepts ISO 8601 only (``Z`` or an offset; naive date-time = UTC; date-only = UTC midnight).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

_ISO_RE = re.compile(
    r"^(?P<y>[+-]\d{6}|\d{4})-(?P<mo>\d{2})-(?P<d>\d{2})"
    r"(?:[T ](?P<h>\d{2}):(?P<mi>\d{2})(?::(?P<s>\d{2})(?:[.,](?P<f>\d+))?)?"
    r"(?P<tz>Z|z|[+-]\d{2}(?::?\d{2})?)?)?$",
    re.ASCII,  # ASCII digits only: JavaScript's Date parser refuses fullwidth or other Unicode digits
)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# the last second formatted and its text up to the milliseconds: a delivery formats one second several times (its
# claim's lease, its rows, its summary), and the date's formatting is most of the cost
_last_second: tuple[int, str] = (0, "1970-01-01T00:00:00.")


def iso_from_ms(ms: int) -> str:
    """Epoch ms → ``YYYY-MM-DDTHH:MM:SS.sssZ`` (exactly what JS ``toISOString`` prints for years 0..9999)."""
    global _last_second
    second, milli = divmod(int(ms), 1000)
    known, prefix = _last_second
    if known != second:
        prefix = (_EPOCH + timedelta(seconds=second)).strftime("%Y-%m-%dT%H:%M:%S.")
        _last_second = (second, prefix)
    return f"{prefix}{milli:03d}Z"


def ms_from_datetime(dt: datetime) -> int:
    delta = dt - datetime(1970, 1, 1, tzinfo=UTC)
    return delta.days * 86_400_000 + delta.seconds * 1000 + delta.microseconds // 1000


def parse_iso_ms(value: object) -> int | None:
    """Parse an ISO 8601 string to epoch ms, or None when it is not one."""
    if not isinstance(value, str):
        return None
    m = _ISO_RE.match(value.strip())
    if not m:
        return None
    try:
        year = int(m["y"])
        if not 1 <= year <= 9999:
            return None
        frac = (m["f"] or "0")[:6].ljust(6, "0")
        dt = datetime(
            year,
            int(m["mo"]),
            int(m["d"]),
            int(m["h"] or 0),
            int(m["mi"] or 0),
            int(m["s"] or 0),
            int(frac),
            tzinfo=UTC,
        )
    except ValueError:
        return None
    if m["h"] is not None and int(m["h"]) == 24:
        return None
    tz = m["tz"]
    ms = ms_from_datetime(dt)
    if tz and tz not in ("Z", "z"):
        sign = 1 if tz[0] == "+" else -1
        digits = tz[1:].replace(":", "")
        hours = int(digits[:2])
        minutes = int(digits[2:4] or 0)
        if hours > 23 or minutes > 59:
            return None
        ms -= sign * (hours * 3_600_000 + minutes * 60_000)
    return ms


def normalize_iso(value: object) -> str | None:
    """Parse and re-emit in ``toISOString`` form; None when unparsable."""
    ms = parse_iso_ms(value)
    return None if ms is None else iso_from_ms(ms)
