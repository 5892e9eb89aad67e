"""Ports: the small interfaces the API and engine code depend on. Adapters implement them.

Rows are plain dataclasses; payloads stay encrypted (storage format) until the domain decrypts them with the
user's key, so an adapter never sees plaintext task content.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from amsg.domain.failures import LlmCallError as LlmCallError  # re-export: the LlmClient contract raises it


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
    error: str | None = None


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
    def check_schema(self, now_ms: int) -> SchemaReport: ...


# ---------------------------------------------------------------------------------------------------------
# LLM (engine.md §5.4). The port raises amsg.domain.failures.LlmCallError (re-exported here) for every
# failure: delivery code reads only its ``permanent``/``code``/``llm_status``, never a transport's errors.


@dataclass
class LlmRequest:
    """One chat-completions call: normalized URL, resolved key, composed body (see amsg.domain.llm)."""

    url: str
    api_key: str = field(repr=False)
    body: dict[str, Any] = field(repr=False)
    # False for agentic rounds: a reply with only tool_calls is legitimate there (engine.md §5.4).
    require_content: bool = True


@dataclass
class LlmReply:
    """Trimmed content, extracted reasoning, the 2xx status; ``response`` is for agentic tool_calls."""

    content: str
    reasoning: str | None
    raw_status: int
    response: dict[str, Any] = field(default_factory=dict, repr=False)


class LlmClient(Protocol):
    def complete(self, request: LlmRequest, *, timeout_s: float) -> LlmReply:
        """POST the request within ``timeout_s`` (the caller's remaining budget); raises LlmCallError."""
        ...


# ---- Web Push (engine.md §5.10, api.md §4.3) -----------------------------------------------------------
#
# Failure model: ``PushSender.send`` returns normally on a 2xx and RAISES :class:`PushSendError` on anything
# else. An exception rather than a result object: the engine's failure path is exception-driven like the
# reference's (``code``/``statusCode``/``permanent`` on the thrown error), a forgotten ``if not result.ok``
# would silently count a failed push as delivered, and the reasoning push is isolated with a try/except
# anyway (§5.9).

MAX_PUSH_PAYLOAD_BYTES = 3993
"""Plaintext limit: 4096 − 103 aes128gcm overhead (16 salt, 4 rs, 1 idlen, 65 keyid, 1 pad, 16 tag)."""

SCHEDULED_PUSH_TTL_S = 2_419_200
"""TTL header of the scheduled sender: 4 weeks."""

PERMANENT_PUSH_STATUSES = frozenset({404, 410, 413})
"""Push-service statuses that retrying cannot fix (subscription gone, payload rejected as too large)."""


def is_permanent_push_status(status: int | None) -> bool:
    """404/410/413 are permanent; other failures (VAPID 400/401/403, 408/409/425/429, 5xx, network) retry."""
    return status in PERMANENT_PUSH_STATUSES


class PushSendError(Exception):
    """A push was not accepted. Carries no endpoint, key or payload text.

    * ``code``: ``PUSH_SEND_FAILED`` (push service answered non-2xx, or network error/timeout),
      ``PUSH_PAYLOAD_TOO_LARGE`` (plaintext over :data:`MAX_PUSH_PAYLOAD_BYTES`; raised before any encryption
      or HTTP), or ``PUSH_SUBSCRIPTION_INVALID`` (stored subscription lacks a usable endpoint/p256dh/auth;
      retryable, since the client can PUT a fresh one).
    * ``status``: the push service's HTTP status, or ``None`` when no response was received. Only this value
      may become the engine's ``pushStatus``.
    * ``permanent``: the api.md §4.3 classification, already applied.
    * ``details``: ``{"bytes", "maxBytes"}`` for ``PUSH_PAYLOAD_TOO_LARGE``, else ``None``.
    """

    def __init__(
        self,
        message: str,
        *,
        code: str = "PUSH_SEND_FAILED",
        status: int | None = None,
        permanent: bool | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.permanent = is_permanent_push_status(status) if permanent is None else permanent
        self.details = details


class PushSender(Protocol):
    def send(
        self,
        subscription: Mapping[str, Any],
        payload: bytes | str,
        *,
        ttl: int = SCHEDULED_PUSH_TTL_S,
        timeout_s: float | None = None,
    ) -> int:
        """Encrypt ``payload`` (UTF-8 JSON) for ``subscription`` (browser ``toJSON()`` shape) and POST it.

        Returns the 2xx status; raises :class:`PushSendError` on any other outcome. ``timeout_s`` overrides
        the sender's HTTP timeout for this call (the instant path's remaining budget, R21).
        """
        ...
