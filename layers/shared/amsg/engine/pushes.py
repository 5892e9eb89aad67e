"""Push envelopes (see docs/compatibility.md): ids, fields, identity stamp, push policy and size budget."""

from __future__ import annotations

from dataclasses import dataclass

from amsg import jsonio
from amsg.crypto import compact_json
from amsg.jsonio import JsonObject
from amsg.ports import MAX_PUSH_PAYLOAD_BYTES
from amsg.task_payload import StoredPayload
from amsg.timeutil import iso_from_ms


@dataclass(frozen=True)
class Occurrence:
    """Identity of one firing: ids are deterministic per occurrence so retries dedupe on the client."""

    task_id: int
    task_uuid: str
    occurrence_ms: int | None

    @property
    def suffix(self) -> str:
        return "" if self.occurrence_ms is None else f"@{self.occurrence_ms}"

    @property
    def session_id(self) -> str:
        return f"sess_task_{self.task_id}{self.suffix}"

    def message_id(self, index: int | str) -> str:
        return f"msg_task_{self.task_id}{self.suffix}_{index}"


def _common(payload: StoredPayload, occ: Occurrence, kind: str, message_id: str, timestamp: str) -> JsonObject:
    message_type = payload.get("messageType")
    return {
        "messageKind": kind,
        "messageType": message_type,
        "source": "instant" if message_type == "instant" else "scheduled",
        "messageId": message_id,
        "sessionId": occ.session_id,
        "timestamp": timestamp,
    }


def _stamp(push: JsonObject, payload: StoredPayload, occ: Occurrence) -> JsonObject:
    """The task identity the server stamps on every push it produces (overwrites any host value)."""
    push["taskId"] = occ.task_id
    push["taskUuid"] = occ.task_uuid
    push["recurrenceType"] = payload.get("recurrenceType") or "none"
    push["occurrenceMs"] = occ.occurrence_ms
    return push


def _presentation(payload: StoredPayload) -> JsonObject:
    """What the service worker shows: title, sender, avatar, subtype, metadata."""
    return {
        "title": f"来自 {payload.get('contactName')}",
        "contactName": payload.get("contactName"),
        "avatarUrl": payload.get("avatarUrl") or None,
        "messageSubtype": payload.get("messageSubtype") or "chat",
        "metadata": payload.get("metadata") if isinstance(payload.get("metadata"), dict) else {},
    }


def reasoning_push(payload: StoredPayload, occ: Occurrence, reasoning: str, now_ms: int) -> JsonObject:
    push = _common(payload, occ, "reasoning", occ.message_id("reasoning"), iso_from_ms(now_ms))
    push["reasoningContent"] = reasoning
    push.update(_presentation(payload))
    return _stamp(push, payload, occ)


def content_pushes(payload: StoredPayload, occ: Occurrence, segments: list[str], now_ms: int) -> list[JsonObject]:
    """One push per segment; field order as the reference builds them (metadata after index/total)."""
    shown = _presentation(payload)
    metadata = shown.pop("metadata")
    pushes = []
    timestamp = iso_from_ms(now_ms)  # the push's wire form, one for the whole batch
    for index, segment in enumerate(segments):
        push = _common(payload, occ, "content", occ.message_id(index), timestamp)
        push["message"] = segment
        push.update(shown)
        push.update({"messageIndex": index + 1, "totalMessages": len(segments), "metadata": metadata})
        pushes.append(_stamp(push, payload, occ))
    return pushes


def should_push(push: JsonObject, *, outboxed: bool) -> bool:
    """Push policy (the reference's): with an outbox only content/result (or an explicit show) are pushed."""
    if not outboxed:
        return True
    notification = push.get("notification")
    show = notification.get("show") if isinstance(notification, dict) else None
    if show in ("always", "when-hidden"):
        return True
    if show is False:
        return False
    kind = push.get("messageKind")
    return kind is None or kind in ("content", "result")


PUSH_ENVELOPE_RESERVED_BYTES = 384
"""Worst-case size of the fields the engine adds to or overwrites on a host-built push (ids, timestamp,
index/total, task identity; uuid <= 64 chars): hosts reserve it when they budget their own pushes."""


def measure_push_payload(text: str, *, reserve_envelope: bool = False) -> JsonObject:
    """The reference's ``measurePushPayload``: UTF-8 size against the 3993-byte plaintext limit."""
    size = len(text.encode("utf-8"))
    reserved = PUSH_ENVELOPE_RESERVED_BYTES if reserve_envelope else 0
    max_bytes = MAX_PUSH_PAYLOAD_BYTES - reserved
    return {
        "bytes": size,
        "maxBytes": max_bytes,
        "remainingBytes": max_bytes - size,
        "withinLimit": size <= max_bytes,
        "envelopeReservedBytes": reserved,
    }


def encode_push(push: JsonObject) -> bytes:
    return compact_json(push).encode("utf-8")


def decode_push(text: str) -> JsonObject:
    value = jsonio.loads(text)
    if not isinstance(value, dict):
        raise ValueError("push is not an object")
    return value
