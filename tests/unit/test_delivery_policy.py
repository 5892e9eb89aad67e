"""Quiet-hours and cap window arithmetic across midnight and DST, and policy validation."""

from __future__ import annotations

import pytest
from amsg.domain.delivery_policy import (
    Cap,
    QuietHours,
    parse_policy,
    policy_from_stored,
    quiet_hours_end,
    window_bounds,
)
from amsg.errors import ApiError
from amsg.timeutil import iso_from_ms, parse_iso_ms


def ms(iso: str) -> int:
    value = parse_iso_ms(iso)
    assert value is not None
    return value


def quiet(start: str, end: str, tz: str) -> QuietHours:
    policy = parse_policy({"quietHours": {"start": start, "end": end, "tzId": tz}})
    assert policy.quiet_hours is not None
    return policy.quiet_hours


def end_iso(q: QuietHours, now: str) -> str | None:
    result = quiet_hours_end(q, ms(now))
    return None if result is None else iso_from_ms(result)


@pytest.mark.parametrize(
    ("tz", "now", "expected"),
    [
        # spans midnight, west of UTC (New York, EST = UTC-5 in January)
        ("America/New_York", "2026-01-15T07:00:00Z", "2026-01-15T12:00:00.000Z"),  # 02:00 local → 07:00 local
        ("America/New_York", "2026-01-15T04:30:00Z", "2026-01-15T12:00:00.000Z"),  # 23:30 local, before midnight
        ("America/New_York", "2026-01-15T04:00:00Z", "2026-01-15T12:00:00.000Z"),  # exactly 23:00: inside
        ("America/New_York", "2026-01-15T12:00:00Z", None),  # exactly 07:00: the window is over
        ("America/New_York", "2026-01-15T17:00:00Z", None),  # noon
        # east of UTC: Tokyo (UTC+9, no DST); 02:00 local = 17:00 UTC the day before
        ("Asia/Tokyo", "2026-01-14T17:00:00Z", "2026-01-14T22:00:00.000Z"),
        ("Asia/Tokyo", "2026-01-14T14:30:00Z", "2026-01-14T22:00:00.000Z"),  # 23:30 local
        ("Asia/Tokyo", "2026-01-15T03:00:00Z", None),  # 12:00 local
        # east of UTC with a half-hour offset: Kolkata (UTC+5:30)
        ("Asia/Kolkata", "2026-06-01T20:30:00Z", "2026-06-02T01:30:00.000Z"),  # 02:00 local → 07:00 local
        # far east, across the date line: Auckland in its summer (UTC+13)
        ("Pacific/Auckland", "2026-01-14T13:00:00Z", "2026-01-14T18:00:00.000Z"),
    ],
)
def test_quiet_hours_spanning_midnight(tz, now, expected):
    assert end_iso(quiet("23:00", "07:00", tz), now) == expected


def test_quiet_hours_within_one_day():
    q = quiet("13:00", "15:30", "Europe/Berlin")  # CET = UTC+1 in January
    assert end_iso(q, "2026-01-15T12:10:00Z") == "2026-01-15T14:30:00.000Z"
    assert end_iso(q, "2026-01-15T11:59:00Z") is None
    assert end_iso(q, "2026-01-15T14:30:00Z") is None


def test_spring_forward_night_is_shorter():
    # New York, 2026-03-08: 02:00 EST → 03:00 EDT. 01:00 local = 06:00Z; 07:00 EDT = 11:00Z
    q = quiet("23:00", "07:00", "America/New_York")
    assert end_iso(q, "2026-03-08T06:00:00Z") == "2026-03-08T11:00:00.000Z"


def test_fall_back_night_is_longer():
    # New York, 2026-11-01: 02:00 EDT → 01:00 EST. 07:00 EST = 12:00Z
    q = quiet("23:00", "07:00", "America/New_York")
    assert end_iso(q, "2026-11-01T05:30:00Z") == "2026-11-01T12:00:00.000Z"  # 01:30 EDT (first pass)
    assert end_iso(q, "2026-11-01T06:30:00Z") == "2026-11-01T12:00:00.000Z"  # 01:30 EST (second pass)


def test_end_inside_a_gap_resolves_after_the_gap():
    # Berlin, 2026-03-29: 02:00 CET → 03:00 CEST; an end of 02:30 does not exist and resolves to 03:30 CEST
    q = quiet("22:00", "02:30", "Europe/Berlin")
    assert end_iso(q, "2026-03-28T23:00:00Z") == "2026-03-29T01:30:00.000Z"  # 03:30 CEST = 01:30Z


def test_end_inside_an_overlap_resolves_to_the_first_instance():
    # Berlin, 2026-10-25: 03:00 CEST → 02:00 CET; 02:30 happens twice, the first is 00:30Z
    q = quiet("22:00", "02:30", "Europe/Berlin")
    assert end_iso(q, "2026-10-24T23:00:00Z") == "2026-10-25T00:30:00.000Z"
    # during the second pass of the hour (02:10 CET = 01:10Z) the first 02:30 is past: the second one ends it
    assert end_iso(q, "2026-10-25T01:10:00Z") == "2026-10-25T01:30:00.000Z"


def test_east_of_utc_dst_sydney():
    # Sydney, 2026-10-04: 02:00 AEST → 03:00 AEDT (spring forward in October, east of UTC)
    q = quiet("01:00", "02:30", "Australia/Sydney")
    # 01:30 AEST = 15:30Z on Oct 3; the 02:30 end does not exist → 03:30 AEDT = 16:30Z
    assert end_iso(q, "2026-10-03T15:30:00Z") == "2026-10-03T16:30:00.000Z"


def test_cap_windows_are_fixed_and_aligned():
    cap = Cap("user", 2, 60)
    start, end = window_bounds(cap, ms("2026-01-15T10:59:59.999Z"))
    assert (iso_from_ms(start), iso_from_ms(end)) == ("2026-01-15T10:00:00.000Z", "2026-01-15T11:00:00.000Z")
    start, _ = window_bounds(cap, ms("2026-01-15T11:00:00Z"))
    assert iso_from_ms(start) == "2026-01-15T11:00:00.000Z"


def test_policy_round_trip_and_canonical_zone():
    policy = parse_policy(
        {
            "quietHours": {"start": "23:00", "end": "07:00", "tzId": "asia/tokyo"},
            "caps": [
                {"scope": "user", "max": 2, "windowMinutes": 60},
                {"scope": "character", "max": 1.0, "windowMinutes": 60},
            ],
        }
    )
    wire = policy.as_wire()
    assert wire["quietHours"] == {"start": "23:00", "end": "07:00", "tzId": "Asia/Tokyo"}
    assert wire["caps"][1] == {"scope": "character", "max": 1, "windowMinutes": 60}
    assert policy_from_stored(wire) == policy
    assert policy_from_stored({"quietHours": None, "caps": []}) is None


@pytest.mark.parametrize(
    ("body", "code", "field"),
    [
        ([], "INVALID_DELIVERY_POLICY", ""),
        ({"quiet": None}, "INVALID_DELIVERY_POLICY", "quiet"),
        ({"quietHours": "night"}, "INVALID_QUIET_HOURS", "quietHours"),
        ({"quietHours": {"start": "24:00", "end": "07:00", "tzId": "UTC"}}, "INVALID_QUIET_HOURS", "quietHours.start"),
        ({"quietHours": {"start": "7:00", "end": "07:00", "tzId": "UTC"}}, "INVALID_QUIET_HOURS", "quietHours.start"),
        ({"quietHours": {"start": "07:00", "end": "07:00", "tzId": "UTC"}}, "INVALID_QUIET_HOURS", "quietHours.end"),
        (
            {"quietHours": {"start": "23:00", "end": "07:00", "tzId": "Mars/Base"}},
            "INVALID_QUIET_HOURS",
            "quietHours.tzId",
        ),
        ({"quietHours": {"start": "23:00", "end": "07:00"}}, "INVALID_QUIET_HOURS", "quietHours.tzId"),
        ({"caps": {}}, "INVALID_DELIVERY_CAP", "caps"),
        ({"caps": [{"scope": "chat", "max": 1, "windowMinutes": 60}]}, "INVALID_DELIVERY_CAP", "caps[0].scope"),
        ({"caps": [{"scope": "user", "max": 0, "windowMinutes": 60}]}, "INVALID_DELIVERY_CAP", "caps[0].max"),
        ({"caps": [{"scope": "user", "max": True, "windowMinutes": 60}]}, "INVALID_DELIVERY_CAP", "caps[0].max"),
        ({"caps": [{"scope": "user", "max": 1, "windowMinutes": 0}]}, "INVALID_DELIVERY_CAP", "caps[0].windowMinutes"),
        (
            {"caps": [{"scope": "user", "max": 1, "windowMinutes": 10081}]},
            "INVALID_DELIVERY_CAP",
            "caps[0].windowMinutes",
        ),
        (
            {
                "caps": [
                    {"scope": "user", "max": 1, "windowMinutes": 60},
                    {"scope": "user", "max": 3, "windowMinutes": 60},
                ]
            },
            "INVALID_DELIVERY_CAP",
            "caps[1]",
        ),
        ({"caps": [{"scope": "user", "max": 1, "windowMinutes": 60}] * 6}, "INVALID_DELIVERY_CAP", "caps"),
    ],
)
def test_validation_codes(body, code, field):
    with pytest.raises(ApiError) as caught:
        parse_policy(body)
    assert caught.value.status == 400
    assert caught.value.code == code
    assert caught.value.details == {"field": field}
