"""Recurrence (the reference's vectors; rows 10 and 11 follow our DST rule, see docs/compatibility.md)."""

from __future__ import annotations

import logging

import pytest
from amsg.domain.recurrence import (
    DAY_MS,
    WEEK_MS,
    NextOccurrence,
    advance_occurrence,
    next_future_occurrence_iso,
    plan_next_occurrence,
)
from amsg.timeutil import iso_from_ms, parse_iso_ms

MIN_MS = 60_000


def ms(iso: str) -> int:
    value = parse_iso_ms(iso)
    assert value is not None
    return value


# The reference's advanceOccurrence table (row 6 and 7 are checked separately: they are relative)
ADVANCE_VECTORS = [
    (1, "2026-03-07T13:00:00.000Z", "daily", 1, "America/New_York", "2026-03-08T12:00:00.000Z"),
    (2, "2026-10-31T12:00:00.000Z", "daily", 1, "America/New_York", "2026-11-01T13:00:00.000Z"),
    (3, "2026-03-04T13:00:00.000Z", "weekly", 1, "America/New_York", "2026-03-11T12:00:00.000Z"),
    (4, "2026-03-28T08:00:00.000Z", "daily", 1, "Europe/London", "2026-03-29T07:00:00.000Z"),
    (5, "2026-03-07T07:30:00.000Z", "daily", 1, "America/New_York", "2026-03-08T07:30:00.000Z"),
    (8, "2026-10-31T05:30:00.000Z", "daily", 1, "America/New_York", "2026-11-01T05:30:00.000Z"),
    (9, "2026-06-01T09:00:00.000Z", "daily", 1, "Nowhere/Fake", "2026-06-02T09:00:00.000Z"),
    (10, "2026-10-24T00:30:00.000Z", "daily", 1, "Europe/London", "2026-10-25T00:30:00.000Z"),
    (11, "2026-03-28T01:30:00.000Z", "daily", 1, "Europe/London", "2026-03-29T01:30:00.000Z"),
    (12, "2026-03-07T13:00:00.123Z", "daily", 2, "Asia/Tokyo", "2026-03-09T13:00:00.123Z"),
    (13, "2026-04-04T15:30:00.000Z", "daily", 1, "Australia/Sydney", "2026-04-05T16:30:00.000Z"),
]


@pytest.mark.parametrize(("row", "occ", "rtype", "periods", "tz", "expected"), ADVANCE_VECTORS)
def test_advance_vectors(row: int, occ: str, rtype: str, periods: int, tz: str, expected: str) -> None:
    assert iso_from_ms(advance_occurrence(ms(occ), rtype, periods, tz)) == expected


def test_row6_tokyo_has_no_dst() -> None:
    base = ms("2026-03-07T13:00:00.000Z")
    assert advance_occurrence(base, "daily", 1, "Asia/Tokyo") == base + DAY_MS


@pytest.mark.parametrize("tz", [None, ""])
def test_row7_no_zone_is_plain_utc_arithmetic(tz: str | None) -> None:
    base = ms("2026-03-07T13:00:00.000Z")
    assert advance_occurrence(base, "daily", 1, tz) == base + DAY_MS
    assert advance_occurrence(base, "weekly", 1, tz) == base + WEEK_MS
    assert advance_occurrence(base, "weekly", 3, tz) == base + 3 * WEEK_MS


def test_row9_unknown_zone_warns_and_falls_back(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="amsg.domain.recurrence"):
        result = advance_occurrence(ms("2026-06-01T09:00:00.000Z"), "daily", 1, "Nowhere/Fake")
    assert result == ms("2026-06-02T09:00:00.000Z")
    assert any("Nowhere/Fake" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("rtype", ["daily", "none", "monthly", None, ""])
def test_any_type_but_weekly_is_one_day(rtype: str | None) -> None:
    base = ms("2026-06-01T09:00:00.000Z")
    assert advance_occurrence(base, rtype, 1, None) == base + DAY_MS
    assert advance_occurrence(base, rtype, 1, "Europe/Paris") == base + DAY_MS


def test_wall_time_kept_across_both_transitions() -> None:
    # 08:00 New York every day of 2026 stays 08:00 local: 13:00Z in winter, 12:00Z in summer.
    base = ms("2026-01-01T13:00:00.000Z")
    for days in (60, 66, 67, 200, 304, 305, 364):
        utc_hour = int(iso_from_ms(advance_occurrence(base, "daily", days, "America/New_York"))[11:13])
        assert utc_hour in (12, 13)
    assert iso_from_ms(advance_occurrence(base, "daily", 66, "America/New_York")) == "2026-03-08T12:00:00.000Z"
    assert iso_from_ms(advance_occurrence(base, "daily", 304, "America/New_York")) == "2026-11-01T13:00:00.000Z"


def test_gap_resolves_after_in_new_york() -> None:
    # 02:30 EST on Mar 7 → Mar 8 02:30 does not exist → 03:30 EDT = 07:30Z (same as row 5, via weekly)
    occ = ms("2026-03-01T07:30:00.000Z")
    assert iso_from_ms(advance_occurrence(occ, "weekly", 1, "America/New_York")) == "2026-03-08T07:30:00.000Z"


def test_second_instance_of_ambiguous_time_moves_to_first() -> None:
    # 01:30 EST on Nov 1 (the *second* 01:30, 06:30Z) advanced by 0 days still means wall 01:30 → first (EDT)
    occ = ms("2026-11-01T06:30:00.000Z")
    assert iso_from_ms(advance_occurrence(occ, "daily", 0, "America/New_York")) == "2026-11-01T05:30:00.000Z"
    # and the next day is plain 01:30 EST
    assert iso_from_ms(advance_occurrence(occ, "daily", 1, "America/New_York")) == "2026-11-02T06:30:00.000Z"


def test_millisecond_fraction_preserved_through_dst() -> None:
    occ = ms("2026-03-07T13:00:00.999Z")
    assert iso_from_ms(advance_occurrence(occ, "daily", 1, "America/New_York")) == "2026-03-08T12:00:00.999Z"


def test_southern_hemisphere_spring_gap_resolves_after() -> None:
    # Sydney: 2026-10-04 02:00 AEST → 03:00 AEDT. 02:30 the day before (16:30Z) → 03:30 AEDT = 16:30Z.
    occ = ms("2026-10-02T16:30:00.000Z")
    assert iso_from_ms(advance_occurrence(occ, "daily", 1, "Australia/Sydney")) == "2026-10-03T16:30:00.000Z"


# The reference's planNextOccurrence table
def test_plan_three_days_overdue() -> None:
    occ = ms("2026-06-01T09:00:00.000Z")
    plan = plan_next_occurrence(occ, "daily", occ + 3 * DAY_MS + 5 * MIN_MS, None)
    assert plan == NextOccurrence(
        next_ms=occ + 4 * DAY_MS,
        skipped_count=4,
        skipped_occurrences=(occ, occ + DAY_MS, occ + 2 * DAY_MS, occ + 3 * DAY_MS),
        skipped_truncated=False,
    )


@pytest.mark.parametrize(
    ("now_offset", "next_offset", "count"),
    [
        (61 * MIN_MS, DAY_MS, 1),
        (0, DAY_MS, 1),  # now == occurrence
        (DAY_MS, 2 * DAY_MS, 2),  # exactly one day later: strictly after now
        (-DAY_MS, DAY_MS, 1),  # not yet due
    ],
)
def test_plan_simple_rows(now_offset: int, next_offset: int, count: int) -> None:
    occ = ms("2026-06-01T09:00:00.000Z")
    plan = plan_next_occurrence(occ, "daily", occ + now_offset, None)
    assert plan.next_ms == occ + next_offset
    assert plan.skipped_count == count
    assert plan.skipped_occurrences == tuple(occ + k * DAY_MS for k in range(count))
    assert plan.skipped_truncated is False


def test_plan_truncates_skip_list_beyond_32() -> None:
    occ = ms("2026-01-01T09:00:00.000Z")
    plan = plan_next_occurrence(occ, "daily", occ + 52 * DAY_MS - MIN_MS, None)
    assert plan.next_ms == occ + 52 * DAY_MS
    assert plan.skipped_count == 52
    assert plan.skipped_occurrences == (occ, occ + 51 * DAY_MS)
    assert plan.skipped_truncated is True


def test_plan_exactly_32_is_listed_in_full() -> None:
    occ = ms("2026-01-01T09:00:00.000Z")
    plan = plan_next_occurrence(occ, "daily", occ + 32 * DAY_MS - MIN_MS, None)
    assert plan.skipped_count == 32
    assert len(plan.skipped_occurrences) == 32
    assert plan.skipped_truncated is False
    plan = plan_next_occurrence(occ, "daily", occ + 33 * DAY_MS - MIN_MS, None)
    assert plan.skipped_count == 33
    assert plan.skipped_occurrences == (occ, occ + 32 * DAY_MS)
    assert plan.skipped_truncated is True


def test_plan_new_york_across_spring_forward() -> None:
    occ = ms("2026-03-01T13:00:00.000Z")  # 08:00 EST
    plan = plan_next_occurrence(occ, "daily", ms("2026-04-01T00:00:00.000Z"), "America/New_York")
    assert iso_from_ms(plan.next_ms) == "2026-04-01T12:00:00.000Z"  # 08:00 EDT
    assert plan.skipped_count == 31
    assert len(plan.skipped_occurrences) == 31
    assert plan.skipped_truncated is False
    listed = [iso_from_ms(x) for x in plan.skipped_occurrences]
    assert listed[0] == "2026-03-01T13:00:00.000Z"
    assert listed[6] == "2026-03-07T13:00:00.000Z"
    assert listed[7] == "2026-03-08T12:00:00.000Z"
    assert listed[-1] == "2026-03-31T12:00:00.000Z"


def test_plan_weekly() -> None:
    occ = ms("2026-06-01T09:00:00.000Z")
    plan = plan_next_occurrence(occ, "weekly", occ + 30 * DAY_MS, None)
    assert plan.next_ms == occ + 35 * DAY_MS
    assert plan.skipped_count == 5
    assert plan.skipped_occurrences == tuple(occ + k * WEEK_MS for k in range(5))
    assert plan.skipped_truncated is False


def test_plan_walks_forward_over_short_days() -> None:
    # 08:00 EST on Mar 7; now 08:30 EDT on Mar 9. The UTC estimate (1 period) is short by two.
    occ = ms("2026-03-07T13:00:00.000Z")
    plan = plan_next_occurrence(occ, "daily", ms("2026-03-09T12:30:00.000Z"), "America/New_York")
    assert iso_from_ms(plan.next_ms) == "2026-03-10T12:00:00.000Z"
    assert plan.skipped_count == 3


def test_plan_over_long_days() -> None:
    # 08:00 EDT on Oct 31; now 07:30 EST on Nov 2: occurrences Oct 31 and Nov 1 are past, Nov 2 08:00 is next.
    occ = ms("2026-10-31T12:00:00.000Z")
    plan = plan_next_occurrence(occ, "daily", ms("2026-11-02T12:30:00.000Z"), "America/New_York")
    assert iso_from_ms(plan.next_ms) == "2026-11-02T13:00:00.000Z"
    assert [iso_from_ms(x) for x in plan.skipped_occurrences] == [
        "2026-10-31T12:00:00.000Z",
        "2026-11-01T13:00:00.000Z",
    ]


def test_plan_far_overdue_with_zone_is_strictly_future() -> None:
    occ = ms("2020-01-01T08:00:00.000Z")
    now = ms("2026-07-15T10:00:00.000Z")
    plan = plan_next_occurrence(occ, "daily", now, "Europe/Berlin")
    assert plan.next_ms > now
    assert plan.next_ms - now <= DAY_MS
    assert iso_from_ms(plan.next_ms) == "2026-07-16T07:00:00.000Z"  # wall 09:00 kept: CEST = 07:00Z
    assert plan.skipped_truncated is True
    assert plan.skipped_occurrences[0] == occ


def test_plan_unknown_zone_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    occ = ms("2026-06-01T09:00:00.000Z")
    with caplog.at_level(logging.WARNING, logger="amsg.domain.recurrence"):
        plan = plan_next_occurrence(occ, "daily", occ + 3 * DAY_MS + 5 * MIN_MS, "Nowhere/Fake")
    assert plan.next_ms == occ + 4 * DAY_MS
    assert len([r for r in caplog.records if "Nowhere/Fake" in r.getMessage()]) == 1


def test_next_future_occurrence_iso() -> None:
    occ = ms("2026-06-01T09:00:00.000Z")
    assert next_future_occurrence_iso(occ, "daily", occ + 3 * DAY_MS + 5 * MIN_MS, None) == "2026-06-05T09:00:00.000Z"
    assert (
        next_future_occurrence_iso(
            ms("2026-03-07T13:00:00.000Z"), "daily", ms("2026-03-07T13:00:00.000Z"), "America/New_York"
        )
        == "2026-03-08T12:00:00.000Z"
    )
