"""The public shape of a task : a whitelist, so credentials in the payload never leak.

Used by ``GET /messages`` (list, no metadata), ``GET /message`` (single, with metadata) and the hook-side
``scheduleTask`` duplicate answer.
"""

from __future__ import annotations

from typing import Any

from amsg import jsonio
from amsg.domain.jsvalues import is_plain_object
from amsg.jsonio import JsonObject
from amsg.ports import TaskRow
from amsg.task_payload import StoredPayload
from amsg.timeutil import iso_from_ms


def parse_last_error(text: str | None) -> Any:
    """The row's ``last_error`` text as JSON (normally a dict); unparsable → ``{reason: text}``; empty → None.

    Only the row attribute is authoritative: the payload's unsanitised copy is never read.
    """
    if not isinstance(text, str) or not text:
        return None
    try:
        # JSON.parse rejects NaN/Infinity; so do we.
        return jsonio.loads(text)
    except ValueError:
        return {"reason": text}


def _iso(ms: int | None) -> str | None:
    return iso_from_ms(ms) if ms else None  # the wire's ISO text; a task without the time shows null


def project_task(row: TaskRow, stored: StoredPayload | None, *, include_metadata: bool) -> JsonObject:
    """Row + decrypted payload → TaskProjection, keys in the reference's order."""
    payload: StoredPayload = stored if isinstance(stored, dict) else {}  # a payload of no shape projects as empty
    raw_metadata = payload.get("metadata")
    metadata = raw_metadata if is_plain_object(raw_metadata) else {}
    projection: JsonObject = {
        "id": row.id,
        "uuid": row.uuid,
        "contactName": payload.get("contactName"),
        "messageType": row.message_type or payload.get("messageType"),
        "messageSubtype": payload.get("messageSubtype"),
        "nextSendAt": _iso(row.next_send_at_ms),
        # Decision 6: a payload without recurrenceType is a one-shot.
        "recurrenceType": payload.get("recurrenceType") or "none",
        "tzId": payload.get("tzId"),
        "status": row.status,
        "retryCount": row.retry_count or 0,
        "createdAt": _iso(row.created_at_ms),
        "updatedAt": _iso(row.updated_at_ms),
        "charId": metadata.get("charId"),
        "clientTaskId": metadata.get("amsgClientTaskId"),
        "credRefs": payload.get("credRefs"),
    }
    if include_metadata:
        projection["metadata"] = raw_metadata
    projection["lastError"] = parse_last_error(row.last_error)
    return projection
