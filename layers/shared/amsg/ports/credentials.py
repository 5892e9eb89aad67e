"""LLM credentials (see docs/data-model.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from amsg.ports.tasks import OwnerClaim

# ---- LLM credentials (see docs/data-model.md) ------------------------------------------------------------


@dataclass
class CredentialWrite:
    cred_id: str
    encrypted_value: str = field(repr=False)  # storage ciphertext of the value JSON
    owner: OwnerClaim | None = None
    generation: int = 0  # asserted for an owner already recorded on the item when the entry names none


class CredentialStore(Protocol):
    def upsert(self, user_id: str, entries: Sequence[CredentialWrite], now_ms: int) -> int:
        """≤ 100 distinct credIds in one all-or-nothing transaction (keeps ``created_at``); returns entry count."""
        ...

    def count(self, user_id: str) -> int: ...

    def list(self, user_id: str) -> list[tuple[str, int | None]]:
        """``[(credId, updated_at ms)]`` in binary credId order (strongly consistent)."""
        ...

    def get_values(self, user_id: str, cred_ids: Sequence[str]) -> dict[str, str]:
        """``{credId: encrypted_value}`` for the ids that exist (consistent BatchGetItem)."""
        ...

    def existing_cred_ids(self, user_id: str, cred_ids: Sequence[str]) -> set[str]: ...

    def delete_ids(self, user_id: str, cred_ids: Sequence[str]) -> int: ...

    def delete_all(self, user_id: str) -> int: ...

    def delete_prefix(self, user_id: str, prefix: str) -> int: ...
