"""What a client-supplied value must satisfy before it may reach storage (checked at the edge, so a bad value
gets its route's documented 4xx instead of a storage error and a 500).

DynamoDB refuses sort keys over 1,024 bytes and numbers outside 38 significant digits / ±1e126; JavaScript
clients cannot represent integers beyond 2^53 exactly nor dates beyond ±8.64e15 ms. Values that cannot name
anything stored (a task id that is not a UUID) are answered without a storage call at all.
"""

from __future__ import annotations

from typing import Any

from amsg.domain.validation import is_valid_uuid

# ECMAScript's largest time value (+275760-09-13T00:00:00Z): no epoch-ms timestamp is larger
MAX_TIME_MS = 8_640_000_000_000_000
# Number.MAX_SAFE_INTEGER: the largest counter/cursor a JavaScript client can send back exactly
MAX_SAFE_INTEGER = 2**53 - 1
MAX_SORT_KEY_BYTES = 1024
# Ids the server mints (plans, operations) are UUIDs; a client-sent id longer than this names nothing stored,
# and stays far below the sort-key limit once prefixed.
MAX_RECORD_ID_BYTES = 256


def utf8_size(value: str) -> int:
    """Bytes DynamoDB counts for ``value`` (a lone surrogate counted as the 3 bytes it is replaced by)."""
    return len(value.encode("utf-8", errors="surrogatepass"))


def can_be_record_id(value: str) -> bool:
    """Whether a client-sent id of a server-minted record could name one (bounded, so it fits a key)."""
    return len(value) <= MAX_RECORD_ID_BYTES and utf8_size(value) <= MAX_RECORD_ID_BYTES


def is_epoch_ms(value: Any) -> bool:
    """A positive integral epoch-milliseconds value (an integral float too, as JSON has one number type)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if isinstance(value, float) and not value.is_integer():
        return False
    return 0 < value <= MAX_TIME_MS


def can_be_task_uuid(value: str) -> bool:
    """Task uuids are UUIDs (schedule-message accepts nothing else), so anything else names no task."""
    return is_valid_uuid(value)


def canonical_task_uuid(value: str) -> str:
    """Task uuids compare case-insensitively (lower-case is canonical, what ``crypto.randomUUID()`` mints), so
    one user's uuid upper-cased can neither be registered by another user nor miss its own task on lookup."""
    return value.lower() if is_valid_uuid(value) else value


def bounded_cursor(value: int) -> int:
    """A cursor beyond every id we can ever allocate selects the same (empty) page as the largest one."""
    return min(value, MAX_SAFE_INTEGER)
