"""The one SQS message model between the tick (which writes it) and run_task (which parses it).

The body names the task and the claim it belongs to — never task content: ``{"userId", "uuid",
"claimVersion", "nextSendAt"}``, on the multi-tenant line ``tenantId`` (whose key space and master key run_task
uses; absent on the single line), plus an optional ``correlationId`` (the id of the API request that created the
task, else the tick's) that run_task puts on its log lines. run_task acts on a message only while that claim
is still current, so a stale, duplicated or forged message does nothing. Validation is plain Python (no
pydantic) so neither the tick nor run_task pays for a model library at cold start.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from amsg import jsonio
from amsg.jsonio import JsonObject
from amsg.tenancy.ids import valid_tenant_id
from amsg.timeutil import iso_from_ms, parse_iso_ms

MAX_UUID_CHARS = 256
MAX_ID_CHARS = 512
MAX_CORRELATION_CHARS = 128


@dataclass(frozen=True)
class TaskMessage:
    user_id: str
    uuid: str
    claim_version: int
    next_send_at_ms: int  # the message body carries it as ISO text (the queue's wire form)
    correlation_id: str | None = None
    tenant_id: str | None = None

    def to_body(self) -> JsonObject:
        body: JsonObject = {
            "userId": self.user_id,
            "uuid": self.uuid,
            "claimVersion": self.claim_version,
            "nextSendAt": iso_from_ms(self.next_send_at_ms),
        }
        if self.correlation_id:
            body["correlationId"] = self.correlation_id
        if self.tenant_id is not None:
            body["tenantId"] = self.tenant_id
        return body


def _text(value: Any, limit: int) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= limit else None


def parse_task_message(body: str | bytes | None) -> TaskMessage | None:
    """The message, or None for a malformed body (a poison pill: acknowledged and dropped, never retried)."""
    from amsg.observability import logger

    try:
        data = jsonio.loads(body) if body else None
    except ValueError:
        data = None
    if isinstance(data, dict):
        user_id = _text(data.get("userId"), MAX_ID_CHARS)
        uuid = _text(data.get("uuid"), MAX_UUID_CHARS)
        next_send_at = parse_iso_ms(_text(data.get("nextSendAt"), 64))
        version = data.get("claimVersion")
        tenant = data.get("tenantId")
        tenant_ok = tenant is None or valid_tenant_id(tenant)
        if user_id and uuid and next_send_at is not None and type(version) is int and version >= 1 and tenant_ok:
            # a bad correlation id only costs the log field, never the message
            correlation = _text(data.get("correlationId"), MAX_CORRELATION_CHARS)
            correlation = correlation if correlation and correlation.isprintable() else None
            return TaskMessage(user_id, uuid, version, next_send_at, correlation, tenant)
    logger.warning("malformed task message dropped")
    return None
