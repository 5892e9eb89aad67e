"""The services a hook context delegates to during an agentic fire (the :class:`amsg.hooks.FireServices`
contract): cancellation, client state, results, follow-up tasks, other tasks of the user, credentials. See
docs/hooks.md."""

from __future__ import annotations

import uuid as uuid_lib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from amsg import jsonio
from amsg.context import AppContext
from amsg.crypto import UserCodec, compact_json
from amsg.domain.client_state import read_namespace, write_entries
from amsg.domain.credentials import make_credential_lookup
from amsg.domain.jsvalues import is_plain_object
from amsg.domain.projection import project_task
from amsg.domain.validation import MAX_TASK_PAYLOAD_BYTES, payload_byte_length
from amsg.engine import registry_upkeep
from amsg.engine.env import Cancelled, DeliveryEnv
from amsg.engine.fire_rules import (
    FOLLOW_UP_NAMESPACE,
    MIN_FOLLOW_UP_LEAD_MS,
    config_error,
    contract_error,
    follow_up,
    state_entries,
)
from amsg.engine.pushes import Occurrence
from amsg.engine.sending import claim_fence, resolve_subscription, send_one
from amsg.errors import ClaimLost, CloudGuardError, TaskUuidConflict, TenantPendingLimit
from amsg.hooks import EmitResult, ScheduleResult
from amsg.jsonio import JsonObject
from amsg.observability import logger
from amsg.ports import NewTask, OutboxAppend, TaskRow
from amsg.ports.tenants import TenantInactive
from amsg.task_payload import StoredPayload
from amsg.timeutil import iso_from_ms, parse_iso_ms


@dataclass
class FireProgress:
    status: str | None = None
    skip_reason: str | None = None
    retry_after: str | None = None
    sent_count: int = 0
    pushed_count: int = 0
    total: int = 0
    iterations: int = 0
    usage: JsonObject | None = None
    usage_total: dict[str, int] | None = None
    llm_calls: int = 0
    outboxed: bool = False
    scheduled: int = 0
    results: int = 0
    existing_ids: set[str] | None = None


class HookServices:
    """What :class:`amsg.hooks.HookContext` delegates to; :class:`amsg.engine.fire.AgenticFire` is one. It works on
    the fire's claimed task (every write is fenced by the claim or gated on the task's owner)."""

    ctx: AppContext
    row: TaskRow
    payload: StoredPayload
    codec: UserCodec
    env: DeliveryEnv
    occurrence: Occurrence
    now: int
    progress: FireProgress

    def _stamp(self, push: JsonObject) -> JsonObject:
        """The task fields every push of this fire carries (the outbox and a redelivery recognise them by)."""
        push["taskId"] = self.row.id
        push["taskUuid"] = self.row.uuid
        push["recurrenceType"] = self.payload.get("recurrenceType") or "none"
        push["occurrenceMs"] = self.occurrence.occurrence_ms
        return push

    def is_cancelled(self) -> bool:
        return self.env.lease_lost()

    def throw_if_cancelled(self) -> None:
        if self.env.lease_lost():
            raise Cancelled("cancelled_mid_delivery")

    def read_state(self, namespace: str, key: str | None = None) -> Any:
        if not isinstance(namespace, str) or not namespace.strip():
            raise TypeError("read_state(namespace) requires a non-empty string")
        store = self.ctx.client_state
        entries = read_namespace(store, self.row.user_id, self.codec, namespace) if store is not None else []
        if key is None:
            return entries
        return next((entry["value"] for entry in entries if entry["key"] == key), None)

    def write_state(self, namespace: str, entries: Any, value: Any = ..., *, guarded: bool = True) -> JsonObject:
        if guarded:
            self.throw_if_cancelled()
        if value is not ...:
            entries = [{"key": entries, "value": value}]
        checked = state_entries(namespace, entries, self.ctx.now_ms())
        if not checked:
            return {"upserted": 0, "skipped": 0, "deleted": 0}
        store = self.ctx.client_state
        if store is None:
            raise config_error("this deployment has no client state store", "AGENTIC_STATE_WRITE_UNSUPPORTED")
        fence = (self.row.uuid, self.row.claim_version) if guarded else None
        try:
            # a fire's state writes are gated on its task's owner (and may not name another owner)
            result = write_entries(
                store, self.row.user_id, self.codec, checked, self.ctx.now_ms(), fence=fence, inherit=self.row.owner
            )
        except ClaimLost:
            raise Cancelled("cancelled_mid_delivery") from None
        except CloudGuardError as exc:
            if exc.code == "CLOUD_OWNER_RETIRED":
                raise Cancelled("owner_retired") from None
            raise
        return {"upserted": result.upserted, "skipped": result.skipped, "deleted": result.deleted}

    def emit_result(self, payload: Mapping[str, Any]) -> EmitResult:
        if not is_plain_object(payload) or not isinstance(payload.get("resultKind"), str) or not payload["resultKind"]:
            raise TypeError("emit_result(payload) requires a dict with a non-empty resultKind")
        index = self.progress.results
        self.progress.results += 1
        message_type = payload.get("messageType") or "auto"
        push: JsonObject = {"messageKind": "result", **payload}
        if not isinstance(push.get("messageId"), str) or not push["messageId"]:
            push["messageId"] = self.occurrence.message_id(f"result_{index}")
        push["sessionId"] = push.get("sessionId") or self.occurrence.session_id
        push["timestamp"] = push.get("timestamp") or iso_from_ms(self.ctx.now_ms())
        push["messageType"] = message_type
        push.setdefault("source", "instant" if message_type == "instant" else "scheduled")
        notification = push.get("notification")
        if not isinstance(notification, dict):
            notification = {}
        if "show" not in notification:
            push["notification"] = {**notification, "show": "always"}
        push["messageKind"] = "result"
        self._stamp(push)
        self.throw_if_cancelled()
        message_id = push["messageId"]
        if message_id not in self._existing_ids():
            self._append_result(push, message_id)
            self._existing_ids().add(message_id)
        if push["notification"].get("show") is False or self.env.push_sender is None:
            return {"messageId": message_id, "pushed": False}
        try:
            subscription = resolve_subscription(self.ctx, self.row, self.payload, self.codec, self.env, fresh=True)
            pushed = send_one(self.ctx, self.row, push, subscription, self.env)
        except (Cancelled, TenantInactive):
            raise
        except Exception as exc:
            logger.warning("result push failed", extra={"error": type(exc).__name__})
            pushed = False
        return {"messageId": message_id, "pushed": pushed}

    def _append_result(self, push: JsonObject, message_id: str) -> None:
        """Append a result row, fenced by the fire's claim (a fire that lost it writes nothing)."""
        row = OutboxAppend(
            message_id=message_id,
            task_uuid=self.row.uuid,
            session_id=push.get("sessionId"),
            encrypted_push=self.codec.encrypt(compact_json(push)),
            created_at=self.ctx.now_ms(),
            owner=self.row.owner,
        )
        try:
            self.ctx.outbox.append(self.row.user_id, [row], fence=claim_fence(self.ctx, self.row))
        except ClaimLost:
            raise Cancelled("cancelled_mid_delivery") from None

    def _existing_ids(self) -> set[str]:
        """Message ids this task already has in the outbox: a re-run never re-appends (and so re-arms) them."""
        if self.progress.existing_ids is None:
            since = min(self.occurrence.occurrence_ms or self.now, self.now) - 3_600_000
            rows = self.ctx.outbox.list_for_task(
                self.row.user_id, self.row.uuid, since_ms=max(0, since), named=self.row.outbox_message_ids
            )
            self.progress.existing_ids = {row.message_id for row in rows}
        return self.progress.existing_ids

    def schedule_task(self, options: Mapping[str, Any]) -> ScheduleResult:
        self.throw_if_cancelled()
        if not is_plain_object(options):
            raise TypeError("schedule_task(options) requires a dict")
        now = self.ctx.now_ms()
        first_ms, message_type, stored = follow_up(options, self.payload, now)
        index = self.progress.scheduled
        task_uuid = options.get("uuid")
        if task_uuid is None:
            seed = f"{self.row.user_id}/{self.row.uuid}@{self.occurrence.occurrence_ms}#{index}"
            task_uuid = str(uuid_lib.uuid5(FOLLOW_UP_NAMESPACE, seed))
        if not isinstance(task_uuid, str) or not task_uuid.strip():
            raise TypeError("schedule_task: uuid must be a non-empty string")
        size = payload_byte_length(stored)
        if size > MAX_TASK_PAYLOAD_BYTES:
            raise contract_error("TASK_PAYLOAD_TOO_LARGE", f"the follow-up payload is {size} bytes")
        limit = self.ctx.settings.max_scheduled_tasks_per_fire
        if index >= limit:
            raise ValueError(f"schedule_task: at most {limit} follow-up task(s) per fire")
        self.progress.scheduled += 1
        encrypted = self.codec.encrypt(compact_json(stored))
        self.throw_if_cancelled()
        try:
            created = self.ctx.tasks.create_task(
                NewTask(
                    self.row.user_id,
                    task_uuid,
                    encrypted,
                    message_type,
                    first_ms,
                    now,
                    owner=self.row.owner,  # a follow-up belongs to the owner of the task that scheduled it
                )
            )
        except TaskUuidConflict:
            existing = self.ctx.tasks.get_task(self.row.user_id, task_uuid)
            projection = None
            if existing is not None and existing.status == "pending":
                projection = self._project(existing)
            return {"created": False, "reason": "duplicate", "uuid": task_uuid, "task": projection}
        except TenantPendingLimit:  # the tenant's pending-task limit (docs/tenancy.md, limits)
            return {"created": False, "reason": "pending_limit", "uuid": task_uuid}
        return {"created": True, "id": created.id, "uuid": task_uuid, "nextSendAt": iso_from_ms(first_ms)}

    def _project(self, row: TaskRow) -> JsonObject | None:
        try:
            payload = jsonio.loads(self.codec.decrypt(row.encrypted_payload))
        except Exception:
            return None
        stored = cast(StoredPayload, payload) if isinstance(payload, dict) else StoredPayload()
        return project_task(row, stored, include_metadata=True)

    def _other_task(self, task_uuid: Any, what: str) -> str:
        self.throw_if_cancelled()
        if not isinstance(task_uuid, str) or not task_uuid.strip():
            raise TypeError(f"{what}(uuid) requires a non-empty string")
        if task_uuid == self.row.uuid:
            raise ValueError(f"{what} cannot target the task that is firing")
        return task_uuid

    def cancel_task(self, task_uuid: str) -> dict[str, bool]:
        task_uuid = self._other_task(task_uuid, "cancel_task")
        cancelled = self.ctx.tasks.delete_task(self.row.user_id, task_uuid)
        if cancelled:
            try:
                self.ctx.outbox.discard_undelivered_for_task(
                    self.row.user_id, task_uuid, named=cancelled.outbox_message_ids
                )
            except Exception as exc:
                logger.warning("outbox discard failed", extra={"error": type(exc).__name__})
        return {"cancelled": bool(cancelled)}

    def renew_task(self, task_uuid: str, next_send_at: str) -> JsonObject:
        task_uuid = self._other_task(task_uuid, "renew_task")
        next_ms = parse_iso_ms(next_send_at) if isinstance(next_send_at, str) else None
        if next_ms is None:
            raise TypeError("renew_task: next_send_at must be an ISO 8601 date-time string")
        if next_ms < self.ctx.now_ms() + MIN_FOLLOW_UP_LEAD_MS:
            raise ValueError("renew_task: next_send_at must be at least 60 seconds in the future")
        user_id = self.row.user_id
        row = self.ctx.tasks.get_task(user_id, task_uuid)
        if row is None or row.status != "pending":
            return {"renewed": False, "reason": "not_found"}
        try:
            payload = jsonio.loads(self.codec.decrypt(row.encrypted_payload))
        except Exception:
            return {"renewed": False, "reason": "not_found"}
        next_iso = iso_from_ms(next_ms)
        payload["firstSendTime"] = next_iso
        now = self.ctx.now_ms()
        registry_kept = registry_upkeep.prepare_update(self.ctx, row, next_ms, payload, now)  # before the task
        updated = self.ctx.tasks.update_pending_task(
            user_id,
            task_uuid,
            encrypted_payload=self.codec.encrypt(compact_json(payload)),
            next_send_at_ms=next_ms,
            now_ms=now,
            expected_rev=row.rev,
            registry_kept=registry_kept,
        )
        if updated is None:
            again = self.ctx.tasks.get_task(user_id, task_uuid)
            return {"renewed": False, "reason": "in_flight" if again and again.status == "pending" else "not_found"}
        return {"renewed": True, "uuid": task_uuid, "nextSendAt": next_iso}

    def resolve_llm_credential(self, cred_id: str) -> dict[str, str] | None:
        if not isinstance(cred_id, str) or not cred_id.strip():
            raise TypeError("resolve_llm_credential(cred_id) requires a non-empty string")
        lookup = make_credential_lookup(self.ctx.credentials, self.row.user_id, self.codec)
        value = lookup(cred_id) if lookup is not None else None
        if not isinstance(value, Mapping):
            return None
        url, key, model = value.get("apiUrl"), value.get("apiKey"), value.get("primaryModel")
        if not (url and key and model):
            return None
        return {"apiUrl": str(url), "apiKey": str(key), "primaryModel": str(model)}
