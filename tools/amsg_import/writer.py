"""Imported records → items of our table, with conditional writes that never overwrite newer data.

Keys and item shapes come from the adapters (``amsg.adapters.dynamo``): the task item is the one
``DynamoTaskStore`` reads (its due-index attributes included), client state goes through
``DynamoClientStateStore.upsert`` itself (its last-write-wins rule decides), outbox rows are built by
``DynamoOutboxStore``'s own item builder and keep their ids. Every write is conditional:

* absent in the target → written;
* present and the same or newer (``updated_at``, owner ``generation``, outbox ack state) → skipped;
* tasks are replaced only while still exactly as an earlier import wrote them (never claimed, updated or
  delivered here since) and the source row is newer.

Per-user id counters are raised *before* the first task or outbox row of a user is written, so an interrupted
run can never leave a counter below an imported id.

An import ledger item ``IMP#<kind>#<sha256(identity)>`` in the user's partition remembers every row an import
brought in (written after the row). A later run that finds the ledger but not the row leaves it absent: the row
was completed or deleted here since (a delivered one-shot task, an outbox row the client deleted, a key the
client removed), and resurrecting it would deliver or show it twice.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from amsg.adapters.dynamo import keys, pending
from amsg.adapters.dynamo.client_state import DynamoClientStateStore, root_sk
from amsg.adapters.dynamo.outbox import ACKED_RETENTION_MS, RETENTION_MS, DynamoOutboxStore
from amsg.adapters.dynamo.table import INLINE_CHARS, DynamoTable, TransactionCancelled, is_conditional_failure
from amsg.adapters.dynamo.tasks import drop_parts as drop_task_parts
from amsg.adapters.dynamo.tasks import payload_attrs as task_payload_attrs
from amsg.crypto import compact_json
from amsg.ports import OutboxAppend, StateWrite
from amsg.timeutil import iso_from_ms
from botocore.exceptions import ClientError

from amsg_import.reader import (
    CloudRecord,
    CredentialRecord,
    OutboxRecord,
    OwnerRecord,
    SidecarRecord,
    StateRecord,
    SubscriptionRecord,
    TaskRecord,
    derived_task_uuid,
    parse_resource_key,
)

WRITTEN = "written"
SKIPPED = "skipped"
FAILED = "failed"


@dataclass(frozen=True)
class Outcome:
    status: str
    reason: str = ""


def _written(reason: str = "") -> Outcome:
    return Outcome(WRITTEN, reason)


def _skipped(reason: str) -> Outcome:
    return Outcome(SKIPPED, reason)


def _failed(reason: str) -> Outcome:
    return Outcome(FAILED, reason)


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | Decimal) and not isinstance(value, bool) else None


LEDGER_PREFIX = "IMP#"
RETENTION_SKIP = "past the outbox retention (the reference deletes it too)"
_METHODS = {
    "tasks": "write_task",
    "state": "write_state",
    "subscriptions": "write_subscription",
    "credentials": "write_credential",
    "outbox": "write_outbox",
    "owners": "write_owner",
    "records": "write_record",
    "sidecars": "write_sidecar",
}


def outbox_ttl(rec: OutboxRecord) -> int:
    """The row's expiry (epoch s) under our retention: 28 days after creation, 7 days after an ack."""
    expires = rec.created_at + RETENTION_MS
    if rec.acked_at is not None:
        expires = min(expires, rec.acked_at + ACKED_RETENTION_MS)
    return expires // 1000


class TargetWriter:
    def __init__(
        self,
        table: DynamoTable,
        *,
        due_shards: int,
        now_ms: int,
        task_floor: int,
        outbox_floor: int,
        space: keys.KeySpace = keys.SINGLE,
    ) -> None:
        self.db = table
        self.space = space  # a tenant's import writes under its namespace (docs/tenancy.md)
        self.due_shards = due_shards
        self.now_ms = now_ms
        self.now_iso = iso_from_ms(now_ms)
        self.task_floor = task_floor
        self.outbox_floor = outbox_floor
        self.state_store = DynamoClientStateStore(table, space=space)
        self.outbox_store = DynamoOutboxStore(table, space=space)
        self._counted: set[str] = set()
        self._task_ids: dict[str, dict[int, str]] = {}
        self._outbox_ids: dict[str, dict[int, str]] = {}

    # ---- the import ledger ------------------------------------------------------------------------------

    def write(self, kind: str, rec: Any) -> Outcome:
        """Write one record of ``kind``, honouring the import ledger (see the module docstring)."""
        method: Callable[[Any], Outcome] = getattr(self, _METHODS[kind])
        located = self._locate(kind, rec)
        if located is None:
            return method(rec)
        item_key, ledger_key = located
        in_ledger = self.db.get(ledger_key, projection="SK") is not None
        if in_ledger and self.db.get(item_key, projection="SK") is None:
            return _skipped("imported before and completed or deleted here since")
        outcome = method(rec)
        if not in_ledger and outcome.status != FAILED and outcome.reason != RETENTION_SKIP:
            try:  # the row is in the table now (written, or already there): remember it
                self.db.table.put_item(
                    Item={**ledger_key, "kind": kind, "at": self.now_ms}, ConditionExpression="attribute_not_exists(SK)"
                )
            except ClientError as exc:
                if not is_conditional_failure(exc):
                    raise
        return outcome

    def _locate(self, kind: str, rec: Any) -> tuple[dict[str, str], dict[str, str]] | None:
        """(the row's item key, its ledger key) for the kinds a client or the engine can delete."""
        if kind == "tasks":
            identity, item_key = rec.uuid, self.space.task_key(rec.user_id, rec.uuid)
        elif kind == "state":
            identity = f"{rec.namespace}\x1f{rec.key}"
            item_key = {"PK": self.space.user_pk(rec.user_id), "SK": root_sk(rec.namespace, rec.key)}
        elif kind == "subscriptions":
            identity, item_key = rec.user_id, self.space.push_key(rec.user_id)
        elif kind == "credentials":
            identity, item_key = rec.cred_id, self.space.credential_key(rec.user_id, rec.cred_id)
        elif kind == "outbox":
            identity, item_key = rec.message_id, self.space.outbox_key(rec.user_id, rec.message_id)
        elif kind == "records":
            identity = f"{rec.kind}\x1f{rec.id}"
            item_key = {"PK": self.space.user_pk(rec.user_id), "SK": f"R#{rec.kind}#{rec.id}"}
        else:
            return None
        ledger_key = {"PK": self.space.user_pk(rec.user_id), "SK": f"{LEDGER_PREFIX}{kind}#{keys.sha256_hex(identity)}"}
        return item_key, ledger_key

    # ---- counters ---------------------------------------------------------------------------------------

    def ensure_counters(self, user_id: str) -> None:
        """Raise the user's task and outbox counters to the source's high-water marks (never lower them)."""
        if user_id in self._counted:
            return
        for name, floor in (("task", self.task_floor), ("outbox", self.outbox_floor)):
            if floor <= 0:
                continue
            try:
                self.db.table.update_item(
                    Key=self.space.counter_key(user_id, name),
                    UpdateExpression="SET n = :m",
                    ConditionExpression="attribute_not_exists(n) OR n < :m",
                    ExpressionAttributeValues={":m": floor},
                )
            except ClientError as exc:
                if not is_conditional_failure(exc):
                    raise
        self._counted.add(user_id)

    def _ids_in_target(self, cache: dict[str, dict[int, str]], user_id: str, prefix: str, name: str) -> dict[int, str]:
        if user_id not in cache:
            cache[user_id] = {
                int(item["id"]): str(item[name])
                for item in self.db.query_prefix(
                    self.space.user_pk(user_id),
                    prefix,
                    ProjectionExpression="id, #n",
                    ExpressionAttributeNames={"#n": name},
                )
                if _int(item.get("id")) is not None and name in item
            }
        return cache[user_id]

    # ---- tasks ------------------------------------------------------------------------------------------

    def task_item(self, rec: TaskRecord, payload_attrs: dict[str, Any]) -> dict[str, Any]:
        """The task as ``DynamoTaskStore`` keeps it. A lease still running in the reference is kept (the task
        becomes eligible when it ends, as it would have there); an expired one and the serialize group are
        dropped (nobody here holds them). A future back-off is kept."""
        item: dict[str, Any] = {
            **self.space.task_key(rec.user_id, rec.uuid),
            "id": rec.id,
            "user_id": rec.user_id,
            "uuid": rec.uuid,
            **payload_attrs,
            "message_type": rec.message_type,
            "next_send_at": rec.next_send_at,
            "status": rec.status,
            "retry_count": rec.retry_count,
            "created_at": rec.created_at,
            "updated_at": rec.updated_at,
            "claim_version": 0,
            "rev": 1,
            "imported": True,
        }
        if rec.last_error is not None:
            item["last_error"] = rec.last_error
        if rec.owner_ref is not None:  # as an owned schedule-message stores it: its fires and writes are guarded
            item["owner_ref"] = rec.owner_ref
            item["owner_gen"] = rec.owner_gen
        if rec.status == "pending":
            eligible = rec.next_send_at
            if rec.lease_until and rec.lease_until > self.now_iso:
                item["lease_until"] = rec.lease_until
                eligible = max(eligible, rec.lease_until)
            if rec.retry_after and rec.retry_after > self.now_iso:
                item["retry_after"] = rec.retry_after
                eligible = max(eligible, rec.retry_after)
            item["due_pk"] = self.space.due_pk(rec.uuid, self.due_shards)
            item["due_sk"] = keys.due_sk(eligible, rec.uuid)
        else:
            item["ret_pk"] = self.space.done_pk(rec.uuid, self.due_shards)
            item["ret_sk"] = rec.updated_at
        return item

    def write_task(self, rec: TaskRecord) -> Outcome:
        self.ensure_counters(rec.user_id)
        projection = "rev, claim_version, updated_at, imported, payload_token, #st"
        existing = self.db.get(
            self.space.task_key(rec.user_id, rec.uuid), projection=projection, names={"#st": "status"}
        )
        if existing is not None:
            untouched = (
                existing.get("imported") and _int(existing.get("rev")) == 1 and not existing.get("claim_version")
            )
            if not untouched:
                return _skipped("already in the target and changed there since")
            if str(existing.get("updated_at", "")) >= rec.updated_at:
                return _skipped("already in the target (same or newer)")
        ids = self._ids_in_target(self._task_ids, rec.user_id, keys.TASK_PREFIX, "uuid")
        if ids.get(rec.id, rec.uuid) != rec.uuid:
            return _failed("task id already used by another task in the target (import into a fresh table)")
        payload, blob = task_payload_attrs(self.db, self.space, rec.user_id, rec.uuid, rec.encrypted_payload)
        put: dict[str, Any] = {"Item": self.task_item(rec, payload)}
        if existing is None:
            put["ConditionExpression"] = "attribute_not_exists(PK)"
        else:
            put["ConditionExpression"] = (
                "imported = :t AND rev = :one AND claim_version = :zero AND updated_at = :seen AND #st = :seenst"
            )
            put["ExpressionAttributeNames"] = {"#st": "status"}
            put["ExpressionAttributeValues"] = {
                ":t": True,
                ":one": 1,
                ":zero": 0,
                ":seen": existing.get("updated_at", ""),
                ":seenst": existing.get("status", ""),
            }
        registry = {
            "Item": {**self.space.uuid_registry_key(rec.uuid), "user_id": rec.user_id, "id": rec.id},
            "ConditionExpression": "attribute_not_exists(PK) OR user_id = :uid",
            "ExpressionAttributeValues": {":uid": rec.user_id},
        }
        actions: list[dict[str, Any]] = [{"Put": put}, {"Put": registry}]
        delta = self._pending_delta(existing, rec.status)
        if delta:  # the tenant's pending count moves with the very write that makes (or ends) a pending task
            actions.append(pending.adjust(self.space, delta))
        try:
            self.db.transact(actions)
        except TransactionCancelled as cancelled:
            if blob is not None:
                drop_task_parts(self.db, self.space, rec.user_id, rec.uuid, blob.token)
            if cancelled.failed(1):
                return _failed("task uuid already belongs to another user in the target")
            return _skipped("changed in the target while importing")
        ids[rec.id] = rec.uuid
        if existing is not None and existing.get("payload_token"):
            drop_task_parts(self.db, self.space, rec.user_id, rec.uuid, str(existing["payload_token"]))
        return _written("replaced an older import") if existing is not None else _written()

    def _pending_delta(self, existing: dict[str, Any] | None, status: str) -> int:
        """How the write changes the tenant's pending count: +1 for a new pending task, ±1 when a replaced import
        changes between pending and settled (its put is conditioned on the status it was read with)."""
        if not pending.counted(self.space):
            return 0
        before = existing is not None and existing.get("status") == "pending"
        return int(status == "pending") - int(before)

    def _drop(self, pk: str, prefix: str, token: str) -> None:
        with contextlib.suppress(ClientError):
            self.db.delete_blob(pk, prefix, token)

    # ---- client state -----------------------------------------------------------------------------------

    def write_state(self, rec: StateRecord) -> Outcome:
        current = self.db.get(
            {"PK": self.space.user_pk(rec.user_id), "SK": root_sk(rec.namespace, rec.key)}, projection="updated_at"
        )
        if current is not None and (_int(current.get("updated_at")) or 0) >= rec.updated_at:
            return _skipped("already in the target (same or newer)")
        write = StateWrite(rec.namespace, rec.key, rec.value, rec.updated_at, rec.plain_bytes)
        result = self.state_store.upsert(rec.user_id, [write], now_ms=self.now_ms)
        if not result.outcomes or not result.outcomes[0]:
            return _skipped("newer in the target")
        return _written("chunked value joined") if rec.chunked else _written()

    # ---- push subscriptions and credentials -------------------------------------------------------------

    def _conditional_update(self, **kwargs: Any) -> bool:
        try:
            self.db.table.update_item(**kwargs)
        except ClientError as exc:
            if is_conditional_failure(exc):
                return False
            raise
        return True

    def write_subscription(self, rec: SubscriptionRecord) -> Outcome:
        done = self._conditional_update(
            Key=self.space.push_key(rec.user_id),
            UpdateExpression="SET subscription = :s, updated_at = :u ADD rev :one",
            ConditionExpression="attribute_not_exists(PK) OR updated_at < :u",
            ExpressionAttributeValues={":s": rec.subscription, ":u": rec.updated_at, ":one": 1},
        )
        return _written() if done else _skipped("already in the target (same or newer)")

    def write_credential(self, rec: CredentialRecord) -> Outcome:
        done = self._conditional_update(
            Key=self.space.credential_key(rec.user_id, rec.cred_id),
            UpdateExpression="SET cred_id = :id, encrypted_value = :v, created_at = :c, updated_at = :u ADD rev :one",
            ConditionExpression="attribute_not_exists(SK) OR updated_at < :u",
            ExpressionAttributeValues={
                ":id": rec.cred_id,
                ":v": rec.encrypted_value,
                ":c": rec.created_at,
                ":u": rec.updated_at,
                ":one": 1,
            },
        )
        return _written() if done else _skipped("already in the target (same or newer)")

    # ---- outbox -----------------------------------------------------------------------------------------

    def write_outbox(self, rec: OutboxRecord) -> Outcome:
        ttl = outbox_ttl(rec)
        if ttl <= self.now_ms // 1000:
            return _skipped(RETENTION_SKIP)
        self.ensure_counters(rec.user_id)
        key = self.space.outbox_key(rec.user_id, rec.message_id)
        existing = self.db.get(key, projection="id, acked_at, delivered_at")
        if existing is not None:
            return self._advance_outbox(rec, key, existing, ttl)
        ids = self._ids_in_target(self._outbox_ids, rec.user_id, keys.OUTBOX_PREFIX, "message_id")
        if ids.get(rec.id, rec.message_id) != rec.message_id:
            return _failed("outbox id already used by another row in the target (import into a fresh table)")
        blob = None
        pk = self.space.user_pk(rec.user_id)
        if len(rec.payload) > INLINE_CHARS:
            blob = self.outbox_store._write_parts(pk, rec.message_id, rec.payload, ttl)
        row = OutboxAppend(
            message_id=rec.message_id,
            encrypted_push=rec.payload,
            created_at=rec.created_at,
            task_uuid=rec.task_uuid,
            session_id=rec.session_id,
            message_index=rec.message_index,
            total_messages=rec.total_messages,
        )
        put = self.outbox_store._put_new(key, row, rec.id, blob)
        item = put["Item"]
        item["ttl"] = ttl
        item["imported"] = True
        if rec.delivered_at is not None:
            item["delivered_at"] = rec.delivered_at
        if rec.acked_at is not None:
            item["acked_at"] = rec.acked_at
            item.pop("ob_lsk", None)  # only unacked rows are listed by GET /outbox
        try:
            self.db.table.put_item(Item=item, ConditionExpression=put["ConditionExpression"])
        except ClientError as exc:
            if blob is not None:
                self._drop(pk, keys.outbox_part_prefix(rec.message_id), blob.token)
            if is_conditional_failure(exc):
                return _skipped("written in the target while importing")
            raise
        ids[rec.id] = rec.message_id
        return _written()

    def _advance_outbox(self, rec: OutboxRecord, key: dict[str, str], existing: dict[str, Any], ttl: int) -> Outcome:
        """A row already here only moves forward: an ack or a delivery the source has and the target lacks."""
        if rec.acked_at is not None and existing.get("acked_at") is None:
            done = self._conditional_update(
                Key=key,
                UpdateExpression="SET acked_at = :a, #ttl = :ttl REMOVE ob_lsk",
                ConditionExpression="attribute_not_exists(acked_at)",
                ExpressionAttributeNames={"#ttl": "ttl"},
                ExpressionAttributeValues={":a": rec.acked_at, ":ttl": ttl},
            )
            return _written("ack state carried over") if done else _skipped("already acked in the target")
        if rec.delivered_at is not None and existing.get("delivered_at") is None and existing.get("acked_at") is None:
            done = self._conditional_update(
                Key=key,
                UpdateExpression="SET delivered_at = :d",
                ConditionExpression="attribute_not_exists(delivered_at) AND attribute_not_exists(acked_at)",
                ExpressionAttributeValues={":d": rec.delivered_at},
            )
            return _written("delivery state carried over") if done else _skipped("already delivered in the target")
        return _skipped("already in the target (same or newer)")

    # ---- cloud data -------------------------------------------------------------------------------------

    def write_owner(self, rec: OwnerRecord) -> Outcome:
        """Owner fences as ``W#<sha256(compact JSON [type, id])>`` items (the cloud-data layout of the table)."""
        sk = "W#" + keys.sha256_hex(compact_json([rec.owner_type, rec.owner_id]))
        done = self._conditional_update(
            Key={"PK": self.space.user_pk(rec.user_id), "SK": sk},
            UpdateExpression="SET owner_type = :t, owner_id = :i, active = :a, generation = :g, updated_at = :u",
            ConditionExpression="attribute_not_exists(SK) OR generation < :g",
            ExpressionAttributeValues={
                ":t": rec.owner_type,
                ":i": rec.owner_id,
                ":a": rec.active,
                ":g": rec.generation,
                ":u": rec.updated_at,
            },
        )
        return _written() if done else _skipped("already in the target (same or newer generation)")

    def write_record(self, rec: CloudRecord) -> Outcome:
        """Cloud management records as ``R#<kind>#<id>`` (data inline, or parts ``RC#<kind>#<id>#<token>#<i>``
        written with the table's blob helper) plus ``RI#<kind>#<sha256(idempotency key)>`` when keyed."""
        pk = self.space.user_pk(rec.user_id)
        sk = f"R#{rec.kind}#{rec.id}"
        current = self.db.get({"PK": pk, "SK": sk}, projection="updated_at")
        if current is not None and (_int(current.get("updated_at")) or 0) >= rec.updated_at:
            return _skipped("already in the target (same or newer)")
        values: dict[str, Any] = {":k": rec.kind, ":id": rec.id, ":u": rec.updated_at}
        sets = ["kind = :k", "id = :id", "updated_at = :u"]
        removes: list[str] = []
        if len(rec.data) <= INLINE_CHARS:
            sets.append("#data = :d")
            values[":d"] = rec.data
            removes += ["write_token", "chunk_count"]
        else:
            blob = self.db.write_blob(pk, f"RC#{rec.kind}#{rec.id}#", rec.data)
            sets += ["write_token = :w", "chunk_count = :n"]
            values[":w"], values[":n"] = blob.token, blob.parts
            removes.append("#data")
        for name, value in (
            ("idempotency_key", rec.idempotency_key),
            ("lease_until", rec.lease_until),
            ("lease_token", rec.lease_token),
        ):
            if value is None:
                removes.append(name)
            else:
                sets.append(f"{name} = :{name}")
                values[f":{name}"] = value
        done = self._conditional_update(
            Key={"PK": pk, "SK": sk},
            UpdateExpression=f"SET {', '.join(sets)} REMOVE {', '.join(removes)}",
            ConditionExpression="attribute_not_exists(SK) OR updated_at < :u",
            ExpressionAttributeNames={"#data": "data"},
            ExpressionAttributeValues=values,
        )
        if not done:
            return _skipped("newer in the target")
        if rec.idempotency_key is not None:
            self.db.table.put_item(
                Item={
                    "PK": pk,
                    "SK": f"RI#{rec.kind}#{keys.sha256_hex(rec.idempotency_key)}",
                    "idempotency_key": rec.idempotency_key,
                    "record_id": rec.id,
                }
            )
        return _written()

    def write_sidecar(self, rec: SidecarRecord) -> Outcome:
        """Ownership metadata is embedded as ``cloud_meta`` on the resource item it describes."""
        target = self.sidecar_target(rec)
        if target is None:
            return _skipped("unknown resource key")
        update = "SET cloud_meta = :m"
        values: dict[str, Any] = {":m": rec.encrypted_value}
        if rec.owner_ref is not None:  # the owner reference our own owned writes store next to the record
            update += ", owner_ref = :r, owner_gen = :g"
            values.update({":r": rec.owner_ref, ":g": rec.owner_gen})
        done = self._conditional_update(
            Key=target,
            UpdateExpression=update,
            ConditionExpression="attribute_exists(SK) AND attribute_not_exists(cloud_meta)",
            ExpressionAttributeValues=values,
        )
        if done:
            return _written()
        current = self.db.get(target, projection="SK, cloud_meta")
        if current is None:
            return _skipped("resource not imported")
        if current.get("cloud_meta") == rec.encrypted_value:
            return _skipped("already in the target (same)")
        return _skipped("has other ownership metadata in the target")

    def sidecar_target(self, rec: SidecarRecord) -> dict[str, str] | None:
        parts = parse_resource_key(rec.resource_key)
        if not parts:
            return None
        kind, rest = parts[0], parts[1:]
        pk = self.space.user_pk(rec.user_id)
        if kind == "task" and len(rest) == 1:
            identity = rest[0]
            if isinstance(identity, list) and len(identity) == 2 and identity[0] == "row":
                # a legacy row without uuid: it was imported under its derived uuid
                return self.space.task_key(rec.user_id, derived_task_uuid(rec.user_id, int(identity[1])))
            return self.space.task_key(rec.user_id, str(identity))
        if kind == "state" and len(rest) == 2:
            return {"PK": pk, "SK": root_sk(str(rest[0]), str(rest[1]))}
        if kind == "credential" and len(rest) == 1:
            return self.space.credential_key(rec.user_id, str(rest[0]))
        if kind == "outbox" and len(rest) == 1:
            return self.space.outbox_key(rec.user_id, str(rest[0]))
        if kind == "subscription":
            return self.space.push_key(rec.user_id)
        return None
