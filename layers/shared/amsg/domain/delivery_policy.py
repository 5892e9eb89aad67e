"""The per-user delivery policy: quiet hours and frequency caps (see docs/delivery-policy.md).

Pure rules: validation of the client's document, and the window arithmetic the engine uses to defer a fire.
Quiet hours are wall-clock times in the user's IANA zone and may span midnight; a wall time that does not
exist (spring-forward gap) resolves after the gap, an ambiguous one (fall-back overlap) to its first instance,
as everywhere else in this service. Caps count fires in fixed windows aligned to the epoch
(``floor(now / window)``), so every consumer computes the same counter for the same instant.
"""

from __future__ import annotations

import re
import zoneinfo
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from amsg.domain.timezones import canonical_tz
from amsg.errors import ApiError, api_error
from amsg.jsonio import JsonObject
from amsg.timeutil import ms_from_datetime

MAX_CAPS = 5  # each cap is one more item in the send-claim transaction
MAX_CAP_COUNT = 1000
MAX_WINDOW_MINUTES = 7 * 24 * 60
SCOPES = ("user", "character")
_HHMM = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")


@dataclass(frozen=True)
class QuietHours:
    start_minute: int  # minutes after local midnight
    end_minute: int
    tz_id: str

    def as_wire(self) -> JsonObject:
        return {"start": _hhmm(self.start_minute), "end": _hhmm(self.end_minute), "tzId": self.tz_id}


@dataclass(frozen=True)
class Cap:
    scope: str  # "user" | "character"
    max: int
    window_minutes: int

    @property
    def window_ms(self) -> int:
        return self.window_minutes * 60_000

    def as_wire(self) -> JsonObject:
        return {"scope": self.scope, "max": self.max, "windowMinutes": self.window_minutes}


@dataclass(frozen=True)
class DeliveryPolicy:
    quiet_hours: QuietHours | None
    caps: tuple[Cap, ...]

    def as_wire(self) -> JsonObject:
        return {
            "quietHours": self.quiet_hours.as_wire() if self.quiet_hours else None,
            "caps": [cap.as_wire() for cap in self.caps],
        }

    @property
    def empty(self) -> bool:
        return self.quiet_hours is None and not self.caps


def _hhmm(minute: int) -> str:
    return f"{minute // 60:02d}:{minute % 60:02d}"


def _invalid(code: str, field: str, message: str) -> ApiError:
    return api_error(code, message, {"field": field})


def _positive_int(value: object, upper: int) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and 1 <= value <= upper:
        return value
    return None


def parse_policy(body: object) -> DeliveryPolicy:
    """Validate the client's document; raises :class:`ApiError` with a documented code and ``details.field``."""
    if not isinstance(body, dict):
        raise _invalid("INVALID_DELIVERY_POLICY", "", "策略必须是对象")
    unknown = sorted(set(body) - {"quietHours", "caps"})
    if unknown:
        raise _invalid("INVALID_DELIVERY_POLICY", unknown[0], "未知字段")
    quiet = _parse_quiet_hours(body.get("quietHours"))
    caps = _parse_caps(body.get("caps", []))
    return DeliveryPolicy(quiet, caps)


def _parse_quiet_hours(value: object) -> QuietHours | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _invalid("INVALID_QUIET_HOURS", "quietHours", "quietHours 必须是对象或 null")
    unknown = sorted(set(value) - {"start", "end", "tzId"})
    if unknown:
        raise _invalid("INVALID_QUIET_HOURS", f"quietHours.{unknown[0]}", "未知字段")
    minutes = []
    for name in ("start", "end"):
        raw = value.get(name)
        match = _HHMM.match(raw) if isinstance(raw, str) else None
        if match is None:
            raise _invalid("INVALID_QUIET_HOURS", f"quietHours.{name}", f"quietHours.{name} 必须是 HH:MM")
        minutes.append(int(match[1]) * 60 + int(match[2]))
    if minutes[0] == minutes[1]:
        raise _invalid("INVALID_QUIET_HOURS", "quietHours.end", "quietHours 的开始和结束不能相同")
    tz_id = canonical_tz(value.get("tzId"))
    if tz_id is None:
        raise _invalid("INVALID_QUIET_HOURS", "quietHours.tzId", "quietHours.tzId 必须是有效的 IANA 时区")
    return QuietHours(minutes[0], minutes[1], tz_id)


def _parse_caps(value: object) -> tuple[Cap, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_CAPS:
        raise _invalid("INVALID_DELIVERY_CAP", "caps", f"caps 必须是最多 {MAX_CAPS} 项的数组")
    caps: list[Cap] = []
    for index, raw in enumerate(value):
        field = f"caps[{index}]"
        if not isinstance(raw, dict) or set(raw) - {"scope", "max", "windowMinutes"}:
            raise _invalid("INVALID_DELIVERY_CAP", field, "cap 必须是 {scope, max, windowMinutes}")
        if raw.get("scope") not in SCOPES:
            raise _invalid("INVALID_DELIVERY_CAP", f"{field}.scope", "scope 必须是 user 或 character")
        count = _positive_int(raw.get("max"), MAX_CAP_COUNT)
        if count is None:
            raise _invalid("INVALID_DELIVERY_CAP", f"{field}.max", f"max 必须是 1-{MAX_CAP_COUNT} 的整数")
        window = _positive_int(raw.get("windowMinutes"), MAX_WINDOW_MINUTES)
        if window is None:
            raise _invalid(
                "INVALID_DELIVERY_CAP", f"{field}.windowMinutes", f"windowMinutes 必须是 1-{MAX_WINDOW_MINUTES} 的整数"
            )
        cap = Cap(raw["scope"], count, window)
        if any(other.scope == cap.scope and other.window_minutes == cap.window_minutes for other in caps):
            raise _invalid("INVALID_DELIVERY_CAP", field, "同一 scope 与 windowMinutes 只能有一个 cap")
        caps.append(cap)
    return tuple(caps)


def policy_from_stored(value: object) -> DeliveryPolicy | None:
    """The stored document (written by :func:`DeliveryPolicy.as_wire`), or None when it is unusable."""
    try:
        policy = parse_policy(value)
    except ApiError:
        return None
    return None if policy.empty else policy


# ---- window arithmetic ----------------------------------------------------------------------------------


def _wall_to_ms(day: date, minute: int, zone: zoneinfo.ZoneInfo, fold: int = 0) -> int:
    # fold=0: a gap time takes the offset before the transition (lands after the gap); an overlap time its first
    local = datetime(day.year, day.month, day.day, minute // 60, minute % 60, tzinfo=zone, fold=fold)
    return ms_from_datetime(local.astimezone(UTC))


def quiet_hours_end(quiet: QuietHours, now_ms: int) -> int | None:
    """When the quiet window containing ``now_ms`` ends (epoch ms), or None when ``now_ms`` is outside it."""
    zone = zoneinfo.ZoneInfo(quiet.tz_id)
    local = datetime.fromtimestamp(now_ms / 1000, zone)
    minute = local.hour * 60 + local.minute
    start, end = quiet.start_minute, quiet.end_minute
    if start < end:
        if not start <= minute < end:
            return None
        end_day = local.date()
    elif minute >= start:
        end_day = local.date() + timedelta(days=1)  # spans midnight: ends tomorrow
    elif minute < end:
        end_day = local.date()
    else:
        return None
    for fold in (0, 1):  # inside the second pass of an overlap the first instance may already be past
        ends = _wall_to_ms(end_day, end, zone, fold)
        if ends > now_ms:
            return ends
    return None


def window_bounds(cap: Cap, now_ms: int) -> tuple[int, int]:
    """The fixed window of ``cap`` that contains ``now_ms``: (start, end) in epoch ms."""
    start = now_ms - now_ms % cap.window_ms
    return start, start + cap.window_ms
