"""Recurrence: the next occurrence of a daily/weekly task, in wall-clock time of its zone.

The base is always the nominal occurrence, never "now", so the wall-clock time never drifts: a task due at
08:00 in New York stays at 08:00 across DST changes (23 h or 25 h apart in UTC).

DST rule (in every zone — the reference only behaves so west of UTC): a wall time
inside a spring-forward gap resolves *after* the gap, shifted by the gap length (02:30 → 03:30); an ambiguous
fall-back wall time resolves to the *first* instance. ``zoneinfo`` with ``fold=0`` does exactly this.
"""

from __future__ import annotations

import logging
import zoneinfo
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo

from amsg.timeutil import iso_from_ms, ms_from_datetime

__all__ = [
    "DAY_MS",
    "MAX_LISTED_SKIPPED_OCCURRENCES",
    "WEEK_MS",
    "NextOccurrence",
    "advance_occurrence",
    "next_future_occurrence_iso",
    "plan_next_occurrence",
]

log = logging.getLogger(__name__)

DAY_MS = 86_400_000
WEEK_MS = 7 * DAY_MS
MAX_LISTED_SKIPPED_OCCURRENCES = 32
# Bound on the walk-back / walk-forward correction of the period estimate in ``plan_next_occurrence``.
_ADJUST_STEP_CAP = 32


@dataclass(frozen=True, slots=True)
class NextOccurrence:
    """The first occurrence strictly after "now", and the occurrences passed over to get there.

    ``skipped_count`` includes the nominal occurrence itself. ``skipped_occurrences`` lists them all (epoch ms)
    when there are at most 32, else only the first and the last with ``skipped_truncated`` set.
    """

    next_ms: int
    skipped_count: int
    skipped_occurrences: tuple[int, ...]
    skipped_truncated: bool


def _days_per_period(recurrence_type: str | None) -> int:
    # Any type other than 'weekly' advances by one day (reference behaviour).
    return 7 if recurrence_type == "weekly" else 1


def _resolve_zone(tz_id: str | None) -> tzinfo | None:
    """The zone for ``tz_id``; None for "no zone" and, with a warning, for an id this runtime cannot load.

    New ids are validated at every entry point; an unusable id can only come from stored or imported
    data, and for those the reference's fallback (plain UTC addition) keeps the task alive.
    """
    if not tz_id:
        return None
    try:
        return zoneinfo.ZoneInfo(tz_id)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, TypeError, OSError):
        log.warning("recurrence: unknown time zone %r, falling back to UTC day arithmetic", tz_id)
        return None


def _advance(occ_ms: int, days: int, zone: tzinfo | None) -> int:
    if zone is None:
        return occ_ms + days * DAY_MS
    seconds, fraction_ms = divmod(occ_ms, 1000)
    try:
        wall = datetime.fromtimestamp(seconds, zone)
        day = wall.date() + timedelta(days=days)
        # fold=0: gap → offset before the transition (lands after the gap); overlap → first instance.
        target = datetime(day.year, day.month, day.day, wall.hour, wall.minute, wall.second, tzinfo=zone, fold=0)
        return ms_from_datetime(target.astimezone(UTC)) + fraction_ms
    except (OverflowError, ValueError, OSError):
        log.warning("recurrence: %s out of the zone's range, falling back to UTC day arithmetic", occ_ms)
        return occ_ms + days * DAY_MS


def advance_occurrence(occ_ms: int, recurrence_type: str | None, periods: int, tz_id: str | None) -> int:
    """``occ_ms`` moved by ``periods`` days (weeks for 'weekly') of wall-clock time in ``tz_id``.

    Without a zone it is plain UTC arithmetic (+24 h / +7 d per period). The millisecond fraction is kept.
    """
    return _advance(occ_ms, _days_per_period(recurrence_type) * periods, _resolve_zone(tz_id))


def plan_next_occurrence(occ_ms: int, recurrence_type: str | None, now_ms: int, tz_id: str | None) -> NextOccurrence:
    """The first occurrence strictly after ``now_ms`` of the series through ``occ_ms``.

    Success, terminal failure, post-send persistence failure and stale fast-forward all use this rule, so a
    task that fires days late skips to its next future slot instead of replaying the missed ones.
    """
    zone = _resolve_zone(tz_id)
    days = _days_per_period(recurrence_type)
    period_ms = days * DAY_MS

    def advance(periods: int) -> int:
        return _advance(occ_ms, days * periods, zone)

    # Estimate from UTC length, then correct for DST-shortened/lengthened days.
    periods = max(1, (now_ms - occ_ms) // period_ms) if now_ms > occ_ms else 1
    cursor = advance(periods)
    for _ in range(_ADJUST_STEP_CAP):
        if periods <= 1:
            break
        previous = advance(periods - 1)
        if previous <= now_ms:
            break
        periods -= 1
        cursor = previous
    for _ in range(_ADJUST_STEP_CAP):
        if cursor > now_ms:
            break
        periods += 1
        cursor = advance(periods)
    if cursor <= now_ms:
        # Still not past now after the capped walk: settle on UTC period arithmetic.
        periods = -(-(now_ms - occ_ms + 1) // period_ms)
        cursor = occ_ms + periods * period_ms

    if periods <= MAX_LISTED_SKIPPED_OCCURRENCES:
        listed = (occ_ms, *(advance(k) for k in range(1, periods)))
        truncated = False
    else:
        listed = (occ_ms, advance(periods - 1))
        truncated = True
    return NextOccurrence(
        next_ms=cursor, skipped_count=periods, skipped_occurrences=listed, skipped_truncated=truncated
    )


def next_future_occurrence_iso(occ_ms: int, recurrence_type: str | None, now_ms: int, tz_id: str | None) -> str:
    """ISO form (``toISOString``) of :func:`plan_next_occurrence`'s ``next_ms``."""
    return iso_from_ms(plan_next_occurrence(occ_ms, recurrence_type, now_ms, tz_id).next_ms)
