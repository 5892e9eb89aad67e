"""Ports: the small interfaces the API and engine code depend on. Adapters implement them.

Rows are plain dataclasses; payloads stay encrypted (storage format) until the domain decrypts them with the
user's key, so an adapter never sees plaintext task content.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


class Clock(Protocol):
    def now_ms(self) -> int: ...


@dataclass
class TaskRow:
    """One task (engine.md §1.1 columns plus our DynamoDB fencing fields)."""

    user_id: str
    uuid: str
    id: int
    encrypted_payload: str
    message_type: str
    next_send_at: str
    status: str = "pending"
    retry_count: int = 0
    last_error: str | None = None
    created_at: str = ""
    updated_at: str = ""
    lease_until: str | None = None
    retry_after: str | None = None
    serialize_group: str | None = None
    claim_version: int = 0
    rev: int = 0


@dataclass
class NewTask:
    user_id: str
    uuid: str
    encrypted_payload: str
    message_type: str
    next_send_at: str
    now_iso: str


@dataclass
class CreatedTask:
    id: int
    superseded: bool


@dataclass
class PushSubscriptionRow:
    encrypted_subscription: str
    updated_at: int


@dataclass
class SchemaReport:
    """What ``POST /init-tenant`` reports: one entry per required table/index/TTL setting."""

    ok: bool
    items: list[dict[str, Any]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


class TaskStore(Protocol):
    def create_task(self, task: NewTask, supersedes_uuid: str | None = None) -> CreatedTask:
        """Allocate the per-user id and insert atomically; raises TaskUuidConflict on a taken uuid."""
        ...

    def get_task(self, user_id: str, uuid: str) -> TaskRow | None: ...

    def list_tasks(self, user_id: str) -> list[TaskRow]: ...

    def update_pending_task(
        self,
        user_id: str,
        uuid: str,
        *,
        encrypted_payload: str,
        next_send_at: str | None,
        now_iso: str,
        expected_rev: int,
    ) -> str | None:
        """Conditional on status pending (+ no live lease when moving next_send_at); returns updated_at or None."""
        ...

    def delete_task(self, user_id: str, uuid: str) -> bool: ...


class PushSubscriptionStore(Protocol):
    def get_push_subscription(self, user_id: str) -> PushSubscriptionRow | None: ...

    def put_push_subscription(self, user_id: str, encrypted: str, updated_at: int) -> None: ...

    def delete_push_subscription(self, user_id: str) -> bool: ...


class OutboxStore(Protocol):
    def discard_undelivered_for_task(self, user_id: str, task_uuid: str) -> int: ...


class SchemaInspector(Protocol):
    def check_schema(self) -> SchemaReport: ...
