"""Quiet hours and frequency caps (see docs/delivery-policy.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

# ---- delivery policy (quiet hours and frequency caps; see docs/delivery-policy.md) ------------------------


@dataclass
class DeliveryPolicyRow:
    encrypted_policy: str = field(repr=False)  # storage ciphertext of the policy JSON under the user key
    updated_at: int


@dataclass(frozen=True)
class CapCharge:
    """One frequency-cap counter a fire is charged to, in the send-claim transaction.

    ``counter`` identifies the user's counter for one scope and fixed window (opaque to the store; character
    ids appear only as an HMAC). ``occurrence`` (task uuid and occurrence) is what is counted: charging the
    same occurrence again is a no-op, so a retry or a takeover never counts a fire twice.
    """

    counter: str
    max: int
    window_end_ms: int
    occurrence: str


class CapReached(Exception):
    """A frequency cap has no room before ``until_ms`` (the end of its window); nothing was written."""

    def __init__(self, until_ms: int) -> None:
        super().__init__(f"frequency cap reached until {until_ms}")
        self.until_ms = until_ms


class DeliveryPolicyStore(Protocol):
    def get_policy(self, user_id: str) -> DeliveryPolicyRow | None: ...

    def put_policy(self, user_id: str, encrypted: str, updated_at: int) -> None: ...

    def delete_policy(self, user_id: str) -> bool: ...

    def cap_room(self, user_id: str, charges: Sequence[CapCharge]) -> int | None:
        """A read-only pre-check before generation: the end of the first window among ``charges`` that is
        already full (without counting this occurrence), or None when each has room."""
        ...
