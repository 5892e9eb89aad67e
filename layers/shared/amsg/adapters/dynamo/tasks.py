"""Tasks in DynamoDB (see docs/data-model.md): per-user ids from a counter in the creating transaction, a
deployment-wide uuid registry, the sparse sharded due index written on every create/update, large payloads split
across items.
"""

from __future__ import annotations

import contextlib
from decimal import Decimal
from typing import Any

from boto3.dynamodb.conditions import Key
from botocore.exceptions import ClientError

from amsg.adapters.dynamo import keys
from amsg.adapters.dynamo.table import (
    INLINE_CHARS,
    BlobRef,
    DynamoTable,
    TransactionCancelled,
    backoff,
    is_conditional_failure,
)
from amsg.errors import StoreUnavailable, TaskUuidConflict
from amsg.ports import KEEP, CreatedTask, DueCandidate, NewTask, Settlement, TaskRow

CREATE_ATTEMPTS = 40


def _int(value: Any, default: int = 0) -> int:
    return int(value) if isinstance(value, (int, Decimal)) else default


class DynamoTaskStore:
    def __init__(self, table: DynamoTable, *, due_shards: int = 1) -> None:
        self.t = table
        self.due_shards = due_shards

    # ---- mapping ----------------------------------------------------------------------------------------

    def _payload_attrs(self, user_id: str, uuid: str, encrypted_payload: str) -> tuple[dict[str, Any], BlobRef | None]:
        """Inline payload, or parts written now and referenced by the item about to be written."""
        if len(encrypted_payload) <= INLINE_CHARS:
            return {"payload": encrypted_payload}, None
        ref = self.t.write_blob(keys.user_pk(user_id), keys.task_part_prefix(uuid), encrypted_payload)
        return {"payload_token": ref.token, "payload_parts": ref.parts}, ref

    def _row(self, item: dict[str, Any]) -> TaskRow:
        payload = item.get("payload")
        if payload is None and item.get("payload_token"):
            payload = self.t.read_blob(
                item["PK"],
                keys.task_part_prefix(item["uuid"]),
                BlobRef(item["payload_token"], _int(item.get("payload_parts"))),
            )
            if payload is None:
                raise StoreUnavailable("task payload parts are incomplete")
        return TaskRow(
            user_id=item["user_id"],
            uuid=item["uuid"],
            id=_int(item.get("id")),
            encrypted_payload=payload or "",
            message_type=item.get("message_type", ""),
            next_send_at=item.get("next_send_at", ""),
            status=item.get("status", "pending"),
            retry_count=_int(item.get("retry_count")),
            last_error=item.get("last_error"),
            created_at=item.get("created_at", ""),
            updated_at=item.get("updated_at", ""),
            lease_until=item.get("lease_until"),
            retry_after=item.get("retry_after"),
            serialize_group=item.get("serialize_group"),
            claim_version=_int(item.get("claim_version")),
            rev=_int(item.get("rev")),
        )

    def _update_if(self, **kwargs: Any) -> dict[str, Any] | None:
        """A conditional UpdateItem: the returned attributes, or None when the condition did not hold."""
        try:
            return self.t.table.update_item(**kwargs).get("Attributes") or {}
        except ClientError as exc:
            if is_conditional_failure(exc):
                return None
            raise

    def _key(self, user_id: str, uuid: str) -> dict[str, str]:
        return {"PK": keys.user_pk(user_id), "SK": keys.task_sk(uuid)}

    # ---- create -----------------------------------------------------------------------------------------

    def create_task(self, task: NewTask, supersedes_uuid: str | None = None) -> CreatedTask:
        payload_attrs, blob = self._payload_attrs(task.user_id, task.uuid, task.encrypted_payload)
        try:
            return self._create(task, payload_attrs, supersedes_uuid)
        except BaseException:
            if blob:
                self.t.delete_blob(keys.user_pk(task.user_id), keys.task_part_prefix(task.uuid), blob.token)
            raise

    def _create(self, task: NewTask, payload_attrs: dict[str, Any], supersedes_uuid: str | None) -> CreatedTask:
        counter_key = keys.counter_key(task.user_id, "task")
        for attempt in range(CREATE_ATTEMPTS):
            if attempt:
                backoff(attempt)
            counter = self.t.get(counter_key)
            current = _int(counter.get("n")) if counter else 0
            new_id = current + 1
            old = self.t.get(self._key(task.user_id, supersedes_uuid)) if supersedes_uuid else None
            item: dict[str, Any] = {
                **self._key(task.user_id, task.uuid),
                "id": new_id,
                "user_id": task.user_id,
                "uuid": task.uuid,
                **payload_attrs,
                "message_type": task.message_type,
                "next_send_at": task.next_send_at,
                "status": "pending",
                "retry_count": 0,
                "created_at": task.now_iso,
                "updated_at": task.now_iso,
                "claim_version": 0,
                "rev": 1,
                "due_pk": keys.due_pk(task.uuid, self.due_shards),
                "due_sk": keys.due_sk(task.next_send_at, task.uuid),
            }
            actions: list[dict[str, Any]] = [
                {
                    "Update": {
                        "Key": counter_key,
                        "UpdateExpression": "SET n = :new",
                        "ConditionExpression": "attribute_not_exists(n) OR n = :cur",
                        "ExpressionAttributeValues": {":new": new_id, ":cur": current},
                    }
                },
                {"Put": {"Item": item, "ConditionExpression": "attribute_not_exists(PK)"}},
                {
                    "Put": {
                        "Item": {**keys.uuid_registry_key(task.uuid), "user_id": task.user_id, "id": new_id},
                        "ConditionExpression": "attribute_not_exists(PK)",
                    }
                },
            ]
            if old is not None:
                actions.append(
                    {
                        "Delete": {
                            "Key": self._key(task.user_id, supersedes_uuid or ""),
                            "ConditionExpression": "rev = :rev",
                            "ExpressionAttributeValues": {":rev": old.get("rev", 0)},
                        }
                    }
                )
                actions.append(
                    {
                        "Delete": {
                            "Key": keys.uuid_registry_key(supersedes_uuid or ""),
                            "ConditionExpression": "attribute_not_exists(PK) OR user_id = :uid",
                            "ExpressionAttributeValues": {":uid": task.user_id},
                        }
                    }
                )
            try:
                self.t.transact(actions)
            except TransactionCancelled as cancelled:
                if cancelled.failed(1) or cancelled.failed(2):
                    raise TaskUuidConflict(task.uuid) from None
                continue  # the counter moved or the superseded task changed: read again
            if old is not None and old.get("payload_token"):
                self._drop_parts(task.user_id, supersedes_uuid or "", str(old["payload_token"]))
            return CreatedTask(id=new_id, superseded=old is not None)
        raise StoreUnavailable("task id allocation kept conflicting")

    # ---- read -------------------------------------------------------------------------------------------

    def get_task(self, user_id: str, uuid: str) -> TaskRow | None:
        item = self.t.get(self._key(user_id, uuid))
        return self._row(item) if item else None

    def list_tasks(self, user_id: str) -> list[TaskRow]:
        items = self.t.query_prefix(keys.user_pk(user_id), "T#")
        return [self._row(item) for item in items]

    # ---- update -----------------------------------------------------------------------------------------

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
        payload_attrs, blob = self._payload_attrs(user_id, uuid, encrypted_payload)
        sets = ["updated_at = :now", "retry_count = :zero", "rev = rev + :one"]
        removes = ["retry_after"]
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
        try:
            result = self.t.table.update_item(
                Key=self._key(user_id, uuid),
                UpdateExpression=f"SET {', '.join(sets)} REMOVE {', '.join(removes)}",
                ConditionExpression=condition,
                ExpressionAttributeNames={"#st": "status"},
                ExpressionAttributeValues=values,
                ReturnValues="ALL_OLD",
            )
        except ClientError as exc:
            if blob:
                self.t.delete_blob(keys.user_pk(user_id), keys.task_part_prefix(uuid), blob.token)
            if is_conditional_failure(exc):
                return None
            raise
        old = result.get("Attributes") or {}
        if old.get("payload_token") and old.get("payload_token") != payload_attrs.get("payload_token"):
            self._drop_parts(user_id, uuid, str(old["payload_token"]))
        return now_iso

    # ---- delete -----------------------------------------------------------------------------------------

    def delete_task(self, user_id: str, uuid: str) -> bool:
        return self._delete_with_registry(user_id, uuid, "attribute_exists(PK)", {})

    def _delete_with_registry(self, user_id: str, uuid: str, condition: str, values: dict[str, Any]) -> bool:
        """Delete the task and its uuid registry entry in one transaction; False when the condition failed."""
        existing = self.t.get(self._key(user_id, uuid), projection="payload_token")
        task_delete: dict[str, Any] = {"Key": self._key(user_id, uuid), "ConditionExpression": condition}
        if values:
            task_delete["ExpressionAttributeValues"] = values
        try:
            self.t.transact(
                [
                    {"Delete": task_delete},
                    {
                        "Delete": {
                            "Key": keys.uuid_registry_key(uuid),
                            "ConditionExpression": "attribute_not_exists(PK) OR user_id = :uid",
                            "ExpressionAttributeValues": {":uid": user_id},
                        }
                    },
                ]
            )
        except TransactionCancelled:
            return False
        if existing and existing.get("payload_token"):
            self._drop_parts(user_id, uuid, str(existing["payload_token"]))
        return True

    # ---- delivery engine --------------------------------------------------------------------------------
    #
    # The due index key is the task's *eligible* time: ``due_sk = <eligible>#<uuid>`` where eligible is the
    # lease expiry while claimed, ``retry_after`` while backing off, else ``next_send_at``. A claimed task thus
    # leaves the due window and comes back by itself if its worker dies (the lease expires): nothing is lost
    # and the tick's query needs no filter. Tasks leave the index for good only when they stop being pending.

    def due_candidates(self, shard: int, now_iso: str, limit: int, start: Any = None) -> tuple[list[DueCandidate], Any]:
        kwargs: dict[str, Any] = {
            "IndexName": "due",
            "KeyConditionExpression": Key("due_pk").eq(f"DUE#{shard}") & Key("due_sk").lte(f"{now_iso}#\uffff"),
            "Limit": limit,
        }
        if start:
            kwargs["ExclusiveStartKey"] = start
        response = self.t.table.query(**kwargs)
        candidates = [
            DueCandidate(
                user_id=item["user_id"],
                uuid=item["uuid"],
                next_send_at=item["next_send_at"],
                retry_count=_int(item.get("retry_count")),
                retry_after=item.get("retry_after"),
            )
            for item in response.get("Items", [])
        ]
        return candidates, response.get("LastEvaluatedKey")

    def claim(
        self,
        user_id: str,
        uuid: str,
        *,
        expected_next_send_at: str,
        now_iso: str,
        lease_until: str,
        owner: str,
        group: str | None = None,
    ) -> TaskRow | None:
        if group is not None:
            return self._claim_grouped(user_id, uuid, expected_next_send_at, now_iso, lease_until, owner, group)
        attributes = self._update_if(
            Key=self._key(user_id, uuid),
            UpdateExpression=(
                "SET lease_until = :lease, lease_owner = :owner, updated_at = :now, due_sk = :dsk "
                "ADD claim_version :one"
            ),
            ConditionExpression=self._CLAIM_CONDITION,
            ExpressionAttributeNames={"#st": "status"},
            ExpressionAttributeValues={
                ":lease": lease_until,
                ":owner": owner,
                ":now": now_iso,
                ":dsk": keys.due_sk(lease_until, uuid),
                ":one": 1,
                ":pending": "pending",
                ":expected": expected_next_send_at,
            },
            ReturnValues="ALL_NEW",
        )
        return None if attributes is None else self._row(attributes)

    _CLAIM_CONDITION = (
        "#st = :pending AND next_send_at = :expected"
        " AND (attribute_not_exists(lease_until) OR lease_until <= :now)"
        " AND (attribute_not_exists(retry_after) OR retry_after <= :now)"
    )

    def _claim_grouped(
        self, user_id: str, uuid: str, expected: str, now_iso: str, lease_until: str, owner: str, group: str
    ) -> TaskRow | None:
        """Claim a task of a serialize group: the gate and the claim are one transaction with the group's lock
        item, whose ``holder`` names the last task that got a grouped lease. The claim commits only if that
        holder, checked at commit time, holds no unexpired pending lease, so at most one task of the group is
        ever in flight (no write skew)."""
        lock_key = {"PK": keys.user_pk(user_id), "SK": f"SG#{group}"}
        lock = self.t.get(lock_key)
        holder = lock.get("holder") if lock else None
        if holder and holder != uuid:
            current = self.t.get(self._key(user_id, holder), projection="#st, lease_until", names={"#st": "status"})
            if current and current.get("status") == "pending" and (current.get("lease_until") or "") > now_iso:
                return None  # group busy: leave the task untouched, it stays due
        actions: list[dict[str, Any]] = [
            {
                "Update": {
                    "Key": self._key(user_id, uuid),
                    "UpdateExpression": (
                        "SET lease_until = :lease, lease_owner = :owner, updated_at = :now, due_sk = :dsk, "
                        "serialize_group = :group ADD claim_version :one"
                    ),
                    "ConditionExpression": self._CLAIM_CONDITION,
                    "ExpressionAttributeNames": {"#st": "status"},
                    "ExpressionAttributeValues": {
                        ":lease": lease_until,
                        ":owner": owner,
                        ":now": now_iso,
                        ":dsk": keys.due_sk(lease_until, uuid),
                        ":group": group,
                        ":one": 1,
                        ":pending": "pending",
                        ":expected": expected,
                    },
                }
            }
        ]
        if lock is None:
            actions.append(
                {
                    "Put": {
                        "Item": {**lock_key, "holder": uuid, "version": 1},
                        "ConditionExpression": "attribute_not_exists(PK)",
                    }
                }
            )
        else:
            actions.append(
                {
                    "Update": {
                        "Key": lock_key,
                        "UpdateExpression": "SET holder = :holder, version = version + :one",
                        "ConditionExpression": "version = :seen",
                        "ExpressionAttributeValues": {":holder": uuid, ":one": 1, ":seen": lock["version"]},
                    }
                }
            )
        if holder and holder != uuid:
            actions.append(
                {
                    "ConditionCheck": {
                        "Key": self._key(user_id, holder),
                        "ConditionExpression": (
                            "attribute_not_exists(PK) OR #st <> :pending OR attribute_not_exists(lease_until)"
                            " OR lease_until <= :now"
                        ),
                        "ExpressionAttributeNames": {"#st": "status"},
                        "ExpressionAttributeValues": {":pending": "pending", ":now": now_iso},
                    }
                }
            )
        try:
            self.t.transact(actions)
        except TransactionCancelled:
            return None  # the lock moved, the holder renewed, or the task changed
        return self.get_task(user_id, uuid)

    def adopt_claim(
        self, user_id: str, uuid: str, claim_version: int, next_send_at: str, lease_until: str, owner: str
    ) -> TaskRow | None:
        """run_task takes over the tick's claim in one write: only if it is still current (same claim version
        and occurrence, still pending and leased), switching to the run lease; returns the task, else None."""
        attributes = self._update_if(
            Key=self._key(user_id, uuid),
            UpdateExpression="SET lease_until = :lease, lease_owner = :owner, due_sk = :dsk",
            ConditionExpression=(
                "claim_version = :cv AND #st = :pending AND next_send_at = :nsa AND attribute_exists(lease_until)"
            ),
            ExpressionAttributeNames={"#st": "status"},
            ExpressionAttributeValues={
                ":lease": lease_until,
                ":owner": owner,
                ":dsk": keys.due_sk(lease_until, uuid),
                ":cv": claim_version,
                ":pending": "pending",
                ":nsa": next_send_at,
            },
            ReturnValues="ALL_NEW",
        )
        return None if attributes is None else self._row(attributes)

    def renew_lease(self, user_id: str, uuid: str, claim_version: int, lease_until: str, owner: str) -> bool:
        renewed = self._update_if(
            Key=self._key(user_id, uuid),
            UpdateExpression="SET lease_until = :lease, lease_owner = :owner, due_sk = :dsk",
            ConditionExpression="claim_version = :cv AND #st = :pending AND attribute_exists(lease_until)",
            ExpressionAttributeNames={"#st": "status"},
            ExpressionAttributeValues={
                ":lease": lease_until,
                ":owner": owner,
                ":dsk": keys.due_sk(lease_until, uuid),
                ":cv": claim_version,
                ":pending": "pending",
            },
        )
        return renewed is not None

    def settle(self, user_id: str, uuid: str, claim_version: int, settlement: Settlement, now_iso: str) -> bool:
        if settlement.delete:
            return self._delete_claimed(user_id, uuid, claim_version)
        with_payload = settlement.encrypted_payload is not None
        if with_payload:
            if self._settle_update(user_id, uuid, claim_version, settlement, now_iso, rewrite_payload=True):
                return True
            current = self.t.get(self._key(user_id, uuid), projection="claim_version")
            if not current or _int(current.get("claim_version")) != claim_version:
                return False
            # the payload changed since the claim (an update-message): keep it, write the columns only
        return self._settle_update(user_id, uuid, claim_version, settlement, now_iso, rewrite_payload=False)

    def _settle_update(
        self, user_id: str, uuid: str, claim_version: int, s: Settlement, now_iso: str, *, rewrite_payload: bool
    ) -> bool:
        sets = ["updated_at = :now", "next_send_at = :nsa"]
        removes = ["lease_until", "lease_owner"]
        values: dict[str, Any] = {":now": now_iso, ":nsa": s.next_send_at, ":cv": claim_version}
        names: dict[str, str] = {}
        condition = "claim_version = :cv"
        if s.status is not None:
            names["#st"] = "status"
            sets += ["#st = :status", "ret_pk = :rpk", "ret_sk = :now"]
            values[":status"] = s.status
            values[":rpk"] = keys.done_pk(uuid, self.due_shards)
            removes += ["due_pk", "due_sk", "retry_after"]
        else:
            eligible = s.retry_after or s.next_send_at
            sets.append("due_sk = :dsk")
            values[":dsk"] = keys.due_sk(eligible, uuid)
            if s.retry_after:
                sets.append("retry_after = :ra")
                values[":ra"] = s.retry_after
            else:
                removes.append("retry_after")
        if s.retry_count is not KEEP:
            sets.append("retry_count = :rc")
            values[":rc"] = s.retry_count
        if s.last_error is not KEEP:
            if s.last_error is None:
                removes.append("last_error")
            else:
                sets.append("last_error = :le")
                values[":le"] = s.last_error
        blob = None
        if rewrite_payload and s.encrypted_payload is not None:
            payload_attrs, blob = self._payload_attrs(user_id, uuid, s.encrypted_payload)
            for name, value in payload_attrs.items():
                sets.append(f"{name} = :{name}")
                values[f":{name}"] = value
            removes += ["payload_token", "payload_parts"] if "payload" in payload_attrs else ["payload"]
            sets.append("rev = rev + :one")
            values[":one"] = 1
            condition += " AND rev = :rev"
            values[":rev"] = s.payload_rev if s.payload_rev is not None else -1
        kwargs: dict[str, Any] = {
            "Key": self._key(user_id, uuid),
            "UpdateExpression": f"SET {', '.join(sets)} REMOVE {', '.join(removes)}",
            "ConditionExpression": condition,
            "ExpressionAttributeValues": values,
            "ReturnValues": "ALL_OLD",
        }
        if names:
            kwargs["ExpressionAttributeNames"] = names
        try:
            old = self.t.table.update_item(**kwargs).get("Attributes") or {}
        except ClientError as exc:
            if blob:
                self._drop_parts(user_id, uuid, blob.token)
            if is_conditional_failure(exc):
                return False
            raise
        if rewrite_payload and old.get("payload_token"):
            self._drop_parts(user_id, uuid, str(old["payload_token"]))
        return True

    def _delete_claimed(self, user_id: str, uuid: str, claim_version: int) -> bool:
        return self._delete_with_registry(user_id, uuid, "claim_version = :cv", {":cv": claim_version})

    def delete_settled_before(self, cutoff_iso: str, *, shards: int, limit: int) -> int:
        """Housekeeping: delete sent/failed tasks not updated since ``cutoff_iso`` (bounded per tick)."""
        deleted = 0
        for shard in range(shards):
            response = self.t.table.query(
                IndexName="retention",
                KeyConditionExpression=Key("ret_pk").eq(f"TDONE#{shard}") & Key("ret_sk").lt(cutoff_iso),
                Limit=max(1, limit - deleted),
            )
            for item in response.get("Items", []):
                user_id = item["PK"][2:]
                uuid = item["SK"][2:]
                try:
                    self.t.transact(
                        [
                            {
                                "Delete": {
                                    "Key": self._key(user_id, uuid),
                                    "ConditionExpression": "#st IN (:sent, :failed) AND updated_at < :cutoff",
                                    "ExpressionAttributeNames": {"#st": "status"},
                                    "ExpressionAttributeValues": {
                                        ":sent": "sent",
                                        ":failed": "failed",
                                        ":cutoff": cutoff_iso,
                                    },
                                }
                            },
                            {
                                "Delete": {
                                    "Key": keys.uuid_registry_key(uuid),
                                    "ConditionExpression": "attribute_not_exists(PK) OR user_id = :uid",
                                    "ExpressionAttributeValues": {":uid": user_id},
                                }
                            },
                        ]
                    )
                    deleted += 1
                except TransactionCancelled:
                    continue
            if deleted >= limit:
                break
        return deleted

    def find_task(self, uuid: str) -> TaskRow | None:
        registry = self.t.get(keys.uuid_registry_key(uuid))
        if not registry:
            return None
        return self.get_task(str(registry["user_id"]), uuid)

    def _drop_parts(self, user_id: str, uuid: str, token: str) -> None:
        """Best-effort removal of a replaced payload's parts (unreferenced parts are harmless garbage)."""
        with contextlib.suppress(ClientError):
            self.t.delete_blob(keys.user_pk(user_id), keys.task_part_prefix(uuid), token)
