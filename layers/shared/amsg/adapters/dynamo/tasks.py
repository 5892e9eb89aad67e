"""Tasks in DynamoDB, the API side (create, read, update, delete; see docs/data-model.md): per-user ids from a
counter in the creating transaction, a deployment-wide uuid registry, the sparse sharded due index written on
every create/update, large payloads split across items. The delivery side (claim, lease, settle) is
:mod:`.claims`; both share the item mapping below.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from amsg.adapters.dynamo import keys, pending
from amsg.adapters.dynamo.compact import pack, unpack, unpack_names
from amsg.adapters.dynamo.counters import cas_attempts, read_counter, set_counter
from amsg.adapters.dynamo.owners import guard_check, owner_sets, raise_if_guard_failed
from amsg.adapters.dynamo.subscriptions import subscription_row
from amsg.adapters.dynamo.table import (
    INLINE_CHARS,
    BlobRef,
    DynamoTable,
    TransactionCancelled,
    backoff,
    is_conditional_failure,
    item_int,
)
from amsg.domain.registry_life import registry_expiry_s
from amsg.errors import StoreUnavailable, TaskUuidConflict, TenantPendingLimit
from amsg.ports import CreatedTask, CreatePrep, DeletedTask, NewTask, OwnerClaim, StoreHint, TaskRow
from amsg.timeutil import iso_from_ms, parse_iso_ms

CREATE_ATTEMPTS = 40


def payload_attrs(
    t: DynamoTable, space: keys.KeySpace, user_id: str, uuid: str, encrypted_payload: str
) -> tuple[dict[str, Any], BlobRef | None]:
    """Inline payload, or parts written now and referenced by the item about to be written."""
    if len(encrypted_payload) <= INLINE_CHARS:
        return {"payload": pack(encrypted_payload)}, None
    ref = t.write_blob(space.user_pk(user_id), keys.task_part_prefix(uuid), encrypted_payload)
    return {"payload_token": ref.token, "payload_parts": ref.parts}, ref


def stored_ms(value: Any) -> int | None:
    """A stored ISO time attribute as epoch ms (None when absent): the storage edge of the task's times."""
    return parse_iso_ms(value) if value else None


def task_row(t: DynamoTable, item: dict[str, Any]) -> TaskRow:
    payload = unpack(item.get("payload"))
    if payload is None and item.get("payload_token"):
        payload = t.read_blob(
            item["PK"],
            keys.task_part_prefix(item["uuid"]),
            BlobRef(item["payload_token"], item_int(item.get("payload_parts"))),
        )
        if payload is None:
            raise StoreUnavailable("task payload parts are incomplete")
    next_send_at_ms, created_at_ms = stored_ms(item.get("next_send_at")) or 0, stored_ms(item.get("created_at"))
    return TaskRow(
        user_id=item["user_id"],
        uuid=item["uuid"],
        id=item_int(item.get("id")),
        encrypted_payload=payload or "",
        message_type=item.get("message_type", ""),
        next_send_at_ms=next_send_at_ms,
        status=item.get("status", "pending"),
        retry_count=item_int(item.get("retry_count")),
        last_error=item.get("last_error"),
        created_at_ms=created_at_ms,
        updated_at_ms=stored_ms(item.get("updated_at")),
        lease_until_ms=stored_ms(item.get("lease_until")),
        retry_after_ms=stored_ms(item.get("retry_after")),
        serialize_group=item.get("serialize_group"),
        claim_version=item_int(item.get("claim_version")),
        rev=item_int(item.get("rev")),
        payload_token=item.get("payload_token"),
        outbox_occurrence_ms=stored_ms(item.get("ob_occ")),
        outbox_message_ids=unpack_names(item.get("ob_mids")),
        correlation_id=item.get("corr_id"),
        owner=task_owner(item),
        deferred_until_ms=stored_ms(item.get("deferred_until")),
        # the expiry follows from the occurrence (docs/decisions.md, 47): `rx` is a 3-byte flag, so that a task
        # item near 1 KB does not cross it; a claim's extension may have pushed the entry's own later (harmless)
        registry_expires_s=registry_expiry_s(next_send_at_ms, created_at_ms or 0) if item.get("rx") else None,
    )


def task_owner(item: dict[str, Any]) -> OwnerClaim | None:
    """The owner guard a task item records (its fires, outbox rows and state writes inherit it)."""
    ref = item.get("owner_ref")
    return OwnerClaim(ref=str(ref), generation=item_int(item.get("owner_gen"))) if ref else None


def registry_delete(space: keys.KeySpace, uuid: str, user_id: str) -> dict[str, Any]:
    """The transaction action that removes a task's uuid registry entry (only if it still names this user)."""
    return {
        "Delete": {
            "Key": space.uuid_registry_key(uuid),
            "ConditionExpression": "attribute_not_exists(PK) OR user_id = :uid",
            "ExpressionAttributeValues": {":uid": user_id},
        }
    }


def registry_delete_of(space: keys.KeySpace, uuid: str, user_id: str, task_id: Any) -> dict[str, Any]:
    """The ``DeleteItem`` of a deleted task's uuid registry entry, only while it names that task (user and id): once
    the task is gone a create may have taken the entry over (:meth:`DynamoTaskStore._orphaned_registry`)."""
    return {
        "Key": space.uuid_registry_key(uuid),
        "ConditionExpression": "user_id = :uid AND id = :id",
        "ExpressionAttributeValues": {":uid": user_id, ":id": task_id},
    }


def drop_parts(t: DynamoTable, space: keys.KeySpace, user_id: str, uuid: str, token: str) -> None:
    """Best-effort removal of a replaced payload's parts (unreferenced parts are harmless garbage)."""
    with contextlib.suppress(ClientError):
        t.delete_blob(space.user_pk(user_id), keys.task_part_prefix(uuid), token)


def delete_with_registry(
    t: DynamoTable,
    space: keys.KeySpace,
    user_id: str,
    uuid: str,
    condition: str,
    values: dict[str, Any],
    *,
    extra: list[dict[str, Any]] | None = None,
    names: dict[str, str] | None = None,
) -> bool:
    """Delete the task and its uuid registry entry (plus ``extra`` actions) in one transaction; False when a
    condition failed. The payload token is read first so split payload parts can be removed afterwards."""
    existing = t.get(space.task_key(user_id, uuid), projection="payload_token")
    task_delete: dict[str, Any] = {"Key": space.task_key(user_id, uuid), "ConditionExpression": condition}
    if values:
        task_delete["ExpressionAttributeValues"] = values
    if names:
        task_delete["ExpressionAttributeNames"] = names
    try:
        t.transact([{"Delete": task_delete}, registry_delete(space, uuid, user_id), *(extra or [])])
    except TransactionCancelled:
        return False
    if existing and existing.get("payload_token"):
        drop_parts(t, space, user_id, uuid, str(existing["payload_token"]))
    return True


def named_as_read(action: dict[str, Any], named: Any) -> dict[str, Any]:
    """A task write additionally conditioned on the outbox message ids it names (``ob_mids``) as read: a batch
    appended after the read fails it, so the caller reads again and its discard finds those rows too
    (docs/decisions.md, 45)."""
    body = dict(action)
    own = "ob_mids = :obm" if named else "attribute_not_exists(ob_mids)"
    condition = body.get("ConditionExpression")
    body["ConditionExpression"] = f"({condition}) AND {own}" if condition else own
    if named:
        body["ExpressionAttributeValues"] = {**body.get("ExpressionAttributeValues", {}), ":obm": named}
    return body


def delete_as_read(t: DynamoTable, space: keys.KeySpace, user_id: str, uuid: str) -> DeletedTask | None:
    """Delete the task and its uuid registry entry in one transaction, conditioned on what was read: the outbox
    ids it names and, in a tenant's space, its status (a pending task leaves the pending count in the same
    transaction). Read again when either moved meanwhile; None when there is no task."""
    counted = pending.counted(space)
    for attempt in range(CREATE_ATTEMPTS):
        if attempt:
            backoff(attempt)
        existing = t.get(
            space.task_key(user_id, uuid), projection="payload_token, #st, ob_mids", names={"#st": "status"}
        )
        if existing is None:
            return None
        present = {"Key": space.task_key(user_id, uuid), "ConditionExpression": "attribute_exists(PK)"}
        task_delete = named_as_read(present, existing.get("ob_mids"))
        status = str(existing.get("status", "pending"))
        extra = [pending.decrement(space)] if counted and status == "pending" else []
        if counted:
            task_delete = pending.with_status(task_delete, status)
        try:
            t.transact([{"Delete": task_delete}, registry_delete(space, uuid, user_id), *extra])
        except TransactionCancelled as cancelled:
            if cancelled.failed(0):
                continue  # gone, or what it names or its status moved: read again
            return None
        if existing.get("payload_token"):
            drop_parts(t, space, user_id, uuid, str(existing["payload_token"]))
        return DeletedTask(outbox_message_ids=unpack_names(existing.get("ob_mids")))
    raise StoreUnavailable("task delete kept conflicting")


@dataclass(frozen=True)
class _CreateHint(StoreHint):
    """What :meth:`DynamoTaskStore.prepare_create` read for the create (the port carries it as an opaque value)."""

    user_id: str
    supersedes_uuid: str | None
    counter: int
    old: dict[str, Any] | None

    @classmethod
    def of(cls, prepared: CreatePrep | None, user_id: str, supersedes_uuid: str | None) -> _CreateHint | None:
        """The hint, when it was read for this very create."""
        hint = prepared.hint if prepared is not None else None
        if isinstance(hint, cls) and (hint.user_id, hint.supersedes_uuid) == (user_id, supersedes_uuid):
            return hint
        return None


class DynamoTaskStore:
    def __init__(
        self,
        table: DynamoTable,
        *,
        due_shards: int = 1,
        space: keys.KeySpace = keys.SINGLE,
        pending_limit: int = 0,
    ) -> None:
        self.db = table
        self.space = space
        self.due_shards = due_shards
        self.pending_limit = pending_limit  # a tenant's default pending-task limit (0: none; pending.py)

    def _payload_attrs(self, user_id: str, uuid: str, encrypted_payload: str) -> tuple[dict[str, Any], BlobRef | None]:
        return payload_attrs(self.db, self.space, user_id, uuid, encrypted_payload)

    def _row(self, item: dict[str, Any]) -> TaskRow:
        return task_row(self.db, item)

    def _key(self, user_id: str, uuid: str) -> dict[str, str]:
        return self.space.task_key(user_id, uuid)

    def _drop_parts(self, user_id: str, uuid: str, token: str) -> None:
        drop_parts(self.db, self.space, user_id, uuid, token)

    # ---- create -----------------------------------------------------------------------------------------

    def prepare_create(self, user_id: str, supersedes_uuid: str | None = None) -> CreatePrep:
        wanted = [self.space.push_key(user_id), self.space.counter_key(user_id, "task")]
        if supersedes_uuid:
            wanted.append(self._key(user_id, supersedes_uuid))
        found = self.db.batch_get(wanted)
        push = found.get((wanted[0]["PK"], wanted[0]["SK"]))
        subscription = subscription_row(push)
        counter = found.get((wanted[1]["PK"], wanted[1]["SK"]))
        old = found.get((wanted[2]["PK"], wanted[2]["SK"])) if supersedes_uuid else None
        hint = _CreateHint(user_id, supersedes_uuid, item_int(counter.get("n")) if counter else 0, old)
        return CreatePrep(subscription=subscription, hint=hint)

    def create_task(
        self, task: NewTask, supersedes_uuid: str | None = None, *, prepared: CreatePrep | None = None
    ) -> CreatedTask:
        payload_attrs, blob = self._payload_attrs(task.user_id, task.uuid, task.encrypted_payload)
        hint = _CreateHint.of(prepared, task.user_id, supersedes_uuid)
        try:
            return self._create(task, payload_attrs, supersedes_uuid, hint)
        except BaseException:
            if blob:
                self.db.delete_blob(self.space.user_pk(task.user_id), keys.task_part_prefix(task.uuid), blob.token)
            raise

    def _create(
        self, task: NewTask, payload_attrs: dict[str, Any], supersedes_uuid: str | None, hint: _CreateHint | None
    ) -> CreatedTask:
        counter_key = self.space.counter_key(task.user_id, "task")
        orphan: dict[str, Any] | None = None  # a registry entry left behind by a deleted task, to take over
        expires_s = self._registry_expiry(task)
        for attempt in cas_attempts(CREATE_ATTEMPTS):
            if attempt == 0 and hint is not None:
                current, old = hint.counter, hint.old  # read together with the subscription
            else:
                current = read_counter(self.db, counter_key)
                old = self.db.get(self._key(task.user_id, supersedes_uuid)) if supersedes_uuid else None
            new_id = current + 1
            item = self._task_item(task, new_id, payload_attrs, expires_s)
            actions: list[dict[str, Any]] = [
                set_counter(counter_key, current, new_id),
                {"Put": {"Item": item, "ConditionExpression": "attribute_not_exists(PK)"}},
                self._registry_put(task, new_id, orphan, expires_s),
            ]
            if old is not None:
                actions += self._supersede_actions(task.user_id, supersedes_uuid or "", old)
            counter_at = self._count_create(actions, old)
            if task.owner is not None:
                actions.append(guard_check(self.space, task.user_id, task.owner.ref, task.owner.generation))
            try:
                self.db.transact(actions)
            except TransactionCancelled as cancelled:
                if task.owner is not None:
                    raise_if_guard_failed(cancelled, len(actions) - 1, 1)
                if cancelled.failed(1):
                    raise TaskUuidConflict(task.uuid) from None
                if cancelled.failed(2):
                    orphan = self._orphaned_registry(task.uuid)  # raises while the entry names a live task
                    continue
                if counter_at is not None and cancelled.failed(counter_at):
                    raise TenantPendingLimit(self._pending_limit()) from None
                continue  # the counter moved or the superseded task changed: read again
            if old is not None and old.get("payload_token"):
                self._drop_parts(task.user_id, supersedes_uuid or "", str(old["payload_token"]))
            named = unpack_names((old or {}).get("ob_mids"))
            return CreatedTask(id=new_id, superseded=old is not None, superseded_outbox_ids=named)
        raise StoreUnavailable("task id allocation kept conflicting")

    def _task_item(
        self, task: NewTask, new_id: int, payload_attrs: dict[str, Any], expires_s: int | None
    ) -> dict[str, Any]:
        """A new task's item (pending, unclaimed, in the due index at its occurrence)."""
        next_iso, now_iso = iso_from_ms(task.next_send_at_ms), iso_from_ms(task.now_ms)
        item: dict[str, Any] = {
            **self._key(task.user_id, task.uuid),
            "id": new_id,
            "user_id": task.user_id,
            "uuid": task.uuid,
            **payload_attrs,
            "message_type": task.message_type,
            "next_send_at": next_iso,
            "status": "pending",
            "retry_count": 0,
            "created_at": now_iso,
            "updated_at": now_iso,
            "claim_version": 0,
            "rev": 1,
            "due_pk": self.space.due_pk(task.uuid, self.due_shards),
            "due_sk": keys.due_sk(next_iso, task.uuid),
            **owner_sets(task.owner),
        }
        if task.correlation_id:
            item["corr_id"] = task.correlation_id
        if expires_s is not None:
            item["rx"] = True  # the entry expires (when follows from the occurrence: task_row)
        return item

    def _registry_expiry(self, task: NewTask) -> int | None:
        """When a new task's uuid registry entry expires (docs/decisions.md, 47): a one-shot's a month after its
        occurrence; a recurring task's never."""
        if not task.one_shot:
            return None
        return registry_expiry_s(task.next_send_at_ms, task.now_ms)

    def _registry_put(
        self, task: NewTask, new_id: int, orphan: dict[str, Any] | None, expires_s: int | None
    ) -> dict[str, Any]:
        """The uuid registry entry of a new task: a new item, or the orphan as read taken over."""
        entry: dict[str, Any] = {**self.space.uuid_registry_key(task.uuid), "user_id": task.user_id, "id": new_id}
        if expires_s is not None:
            entry["ttl"] = expires_s
        put: dict[str, Any] = {"Item": entry, "ConditionExpression": "attribute_not_exists(PK)"}
        if orphan is not None and orphan.get("id") is None:
            put["ConditionExpression"] = "user_id = :ou AND attribute_not_exists(id)"
            put["ExpressionAttributeValues"] = {":ou": orphan.get("user_id")}
        elif orphan is not None:
            put["ConditionExpression"] = "user_id = :ou AND id = :oi"
            put["ExpressionAttributeValues"] = {":ou": orphan.get("user_id"), ":oi": orphan.get("id")}
        return {"Put": put}

    def _orphaned_registry(self, uuid: str) -> dict[str, Any] | None:
        """The uuid's registry entry when the task it names is gone (a settlement deletes the task before the
        entry, and may stop in between: docs/delivery.md), None when there is none any more; a conflict while it
        names a task that exists."""
        entry = self.db.get(self.space.uuid_registry_key(uuid))
        if entry is None:
            return None
        named = self.db.get(self.space.task_key(str(entry.get("user_id")), uuid), projection="id")
        if named is not None:
            raise TaskUuidConflict(uuid)
        return entry

    def _supersede_actions(self, user_id: str, uuid: str, old: dict[str, Any]) -> list[dict[str, Any]]:
        """Delete the superseded task as it was read (in a tenant's space: also in the status it was read in, so
        the pending count moves with it)."""
        as_read = {
            "Key": self._key(user_id, uuid),
            "ConditionExpression": "rev = :rev",
            "ExpressionAttributeValues": {":rev": old.get("rev", 0)},
        }
        delete = named_as_read(as_read, old.get("ob_mids"))
        if pending.counted(self.space):
            delete = pending.with_status(delete, str(old.get("status", "pending")))
        return [{"Delete": delete}, registry_delete(self.space, uuid, user_id)]

    def _count_create(self, actions: list[dict[str, Any]], old: dict[str, Any] | None) -> int | None:
        """Append the pending count's increment (a tenant's space; not when a pending task is replaced, which
        leaves the count as it is); its index in ``actions``, or None."""
        if not pending.counted(self.space):
            return None
        if old is not None and old.get("status", "pending") == "pending":
            return None
        actions.append(pending.increment(self.space, self.pending_limit))
        return len(actions) - 1

    def _pending_limit(self) -> int:
        _, override = pending.read(self.db, self.space)
        return self.pending_limit if override is None else override

    # ---- read -------------------------------------------------------------------------------------------

    def get_task(self, user_id: str, uuid: str) -> TaskRow | None:
        item = self.db.get(self._key(user_id, uuid))
        return self._row(item) if item else None

    def list_tasks(self, user_id: str) -> list[TaskRow]:
        items = self.db.query_prefix(self.space.user_pk(user_id), keys.TASK_PREFIX)
        return [self._row(item) for item in items]

    # ---- update -----------------------------------------------------------------------------------------

    def update_pending_task(
        self,
        user_id: str,
        uuid: str,
        *,
        encrypted_payload: str,
        next_send_at_ms: int | None,
        now_ms: int,
        expected_rev: int,
        owner: OwnerClaim | None = None,
        keep_deferral: bool = False,
        registry_kept: bool = False,
    ) -> int | None:
        """Rewrite a pending task's payload (and occurrence) iff it is still at ``expected_rev``; an owned task's
        update commits only while its owner holds (``CLOUD_OWNER_RETIRED`` otherwise).

        An update starts the task's retry state afresh (``retry_after`` and a delivery-policy ``deferred_until``
        go), except with ``keep_deferral``: a payload-only edit of a task held back by quiet hours or a cap
        keeps its wake-up, or it would be claimed at the old deferral time with nothing saying it was held."""
        payload_attrs, blob = self._payload_attrs(user_id, uuid, encrypted_payload)
        now_iso = iso_from_ms(now_ms)
        next_send_at = None if next_send_at_ms is None else iso_from_ms(next_send_at_ms)
        sets = ["updated_at = :now", "retry_count = :zero", "rev = rev + :one"]
        removes = [] if keep_deferral and next_send_at is None else ["retry_after", "deferred_until"]
        if registry_kept:
            removes.append("rx")
        values: dict[str, Any] = {":now": now_iso, ":zero": 0, ":one": 1, ":pending": "pending", ":rev": expected_rev}
        for name, value in payload_attrs.items():
            sets.append(f"{name} = :{name}")
            values[f":{name}"] = value
        if "payload" in payload_attrs:
            removes += ["payload_token", "payload_parts"]
        else:
            removes.append("payload")
        condition = "#st = :pending AND rev = :rev"
        if next_send_at is not None:
            sets += ["next_send_at = :nsa", "due_sk = :dsk"]
            values[":nsa"] = next_send_at
            values[":dsk"] = keys.due_sk(next_send_at, uuid)
            # the lease gate: never move the occurrence of a task that is being delivered
            condition += " AND (attribute_not_exists(lease_until) OR lease_until <= :now)"
        update = {
            "Key": self._key(user_id, uuid),
            "UpdateExpression": f"SET {', '.join(sets)} REMOVE {', '.join(removes)}",
            "ConditionExpression": condition,
            "ExpressionAttributeNames": {"#st": "status"},
            "ExpressionAttributeValues": values,
        }
        if owner is not None:
            return self._update_guarded(user_id, uuid, update, owner, payload_attrs, blob, now_ms)
        try:
            result = self.db.table.update_item(**update, ReturnValues="ALL_OLD")
        except ClientError as exc:
            if blob:
                self.db.delete_blob(self.space.user_pk(user_id), keys.task_part_prefix(uuid), blob.token)
            if is_conditional_failure(exc):
                return None
            raise
        old = result.get("Attributes") or {}
        if old.get("payload_token") and old.get("payload_token") != payload_attrs.get("payload_token"):
            self._drop_parts(user_id, uuid, str(old["payload_token"]))
        return now_ms

    def _update_guarded(
        self,
        user_id: str,
        uuid: str,
        update: dict[str, Any],
        owner: OwnerClaim,
        payload_attrs: dict[str, Any],
        blob: BlobRef | None,
        now_ms: int,
    ) -> int | None:
        old = self.db.get(self._key(user_id, uuid), projection="payload_token") or {}
        try:
            self.db.transact([{"Update": update}, guard_check(self.space, user_id, owner.ref, owner.generation)])
        except TransactionCancelled as cancelled:
            if blob:
                self.db.delete_blob(self.space.user_pk(user_id), keys.task_part_prefix(uuid), blob.token)
            raise_if_guard_failed(cancelled, 1, 1)
            return None
        except BaseException:
            if blob:
                self.db.delete_blob(self.space.user_pk(user_id), keys.task_part_prefix(uuid), blob.token)
            raise
        if old.get("payload_token") and old.get("payload_token") != payload_attrs.get("payload_token"):
            self._drop_parts(user_id, uuid, str(old["payload_token"]))
        return now_ms

    # ---- delete -----------------------------------------------------------------------------------------

    def delete_task(self, user_id: str, uuid: str) -> DeletedTask | None:
        return delete_as_read(self.db, self.space, user_id, uuid)

    def set_registry_expiry(self, row: TaskRow, until_s: int | None) -> None:
        """The entry's new expiry (None: none), while it names this task, and put back if it is gone: only a task
        whose entry expires calls this, so the entry is its own or was never taken over. One conditional write on
        a claim of a task still alive half a month before its entry expires, or on an update that moves its
        occurrence later or makes it recurring (docs/decisions.md, 47)."""
        values: dict[str, Any] = {":uid": row.user_id, ":id": row.id}
        expression = "SET user_id = :uid, id = :id REMOVE #ttl"
        if until_s is not None:
            expression, values[":ttl"] = "SET user_id = :uid, id = :id, #ttl = :ttl", until_s
        try:
            self.db.table.update_item(
                Key=self.space.uuid_registry_key(row.uuid),
                UpdateExpression=expression,
                ConditionExpression="attribute_not_exists(PK) OR (user_id = :uid AND id = :id)",
                ExpressionAttributeNames={"#ttl": "ttl"},
                ExpressionAttributeValues=values,
            )
        except ClientError as exc:
            if not is_conditional_failure(exc):
                raise
            # else a create took the uuid over since this task's entry expired: it names another task now

    def find_task(self, uuid: str) -> TaskRow | None:
        registry = self.db.get(self.space.uuid_registry_key(uuid))
        if not registry:
            return None
        return self.get_task(str(registry["user_id"]), uuid)
