"""Settling claimed tasks in DynamoDB: the fenced settlement write (keep, move, fail or delete the task, with the
delivered marks of the last pushes in the same transaction) and housekeeping of settled tasks. The claim side is
:mod:`.claims`, whose store extends this one.
"""

from __future__ import annotations

import contextlib
from typing import Any

from botocore.exceptions import ClientError

from amsg.adapters.dynamo import keys, pending
from amsg.adapters.dynamo.outbox_sending import delivered_marks
from amsg.adapters.dynamo.single_writes import SingleWrite
from amsg.adapters.dynamo.table import DynamoTable, TransactionCancelled, is_conditional_failure, item_int
from amsg.adapters.dynamo.tasks import (
    delete_with_registry,
    drop_parts,
    payload_attrs,
    registry_delete,
    registry_delete_of,
    task_row,
)
from amsg.ports import KEEP, Settlement, TaskRow
from amsg.timeutil import iso_from_ms


class DynamoSettlements:
    """The table handle, the fenced writes every claim operation shares, and the settlement of a claim."""

    def __init__(self, table: DynamoTable, *, due_shards: int = 1, space: keys.KeySpace = keys.SINGLE) -> None:
        self.db = table
        self.space = space
        self.due_shards = due_shards

    def _row(self, item: dict[str, Any]) -> TaskRow:
        return task_row(self.db, item)

    def _key(self, user_id: str, uuid: str) -> dict[str, str]:
        return self.space.task_key(user_id, uuid)

    def _update_if(self, **kwargs: Any) -> dict[str, Any] | None:
        """A conditional UpdateItem: the returned attributes, or None when the condition did not hold."""
        try:
            return self.db.table.update_item(**kwargs).get("Attributes") or {}
        except ClientError as exc:
            if is_conditional_failure(exc):
                return None
            raise

    # ---- delivery engine --------------------------------------------------------------------------------
    #
    # The due index key is the task's *eligible* time: ``due_sk = <eligible>#<uuid>`` where eligible is the
    # lease expiry while claimed, ``retry_after`` while backing off, else ``next_send_at``. A claimed task thus
    # leaves the due window and comes back by itself if its worker dies (the lease expires): nothing is lost
    # and the tick's query needs no filter. Tasks leave the index for good only when they stop being pending.

    def settle(self, user_id: str, uuid: str, claim_version: int, settlement: Settlement, now_ms: int) -> bool:
        """The fenced settlement, after the delivered marks of this run's last pushes. Each is its own conditional
        write, in an order whose every crash point the next run already handles (docs/delivery.md, "Outbox
        first"): the marks first (facts about pushes that left: a task still pending under this claim after them
        is claimed again once its lease ends, and the run finds its batch delivered and settles it), then the
        task, then a one-shot's uuid registry entry unless it expires by itself (an entry left behind names a
        task that is gone: a create of that uuid takes it over). A transaction would bill every item twice
        (docs/decisions.md, 38)."""
        self._mark_delivered(user_id, settlement)
        if settlement.delivered and settlement.delete:
            if self._delete_delivered(user_id, uuid, claim_version, settlement):
                return True
        elif settlement.delivered and not settlement.delete and settlement.encrypted_payload is None:
            update = self._settle_update_kwargs(user_id, uuid, claim_version, settlement, now_ms)
            if settlement.status is None or not pending.counted(self.space):
                return self._write_if(SingleWrite("update", update))
            try:
                self.db.transact(self._ending({"Update": update}))
            except TransactionCancelled:
                return False
            return True
        return self._settle(user_id, uuid, claim_version, settlement, now_ms)

    def _write_if(self, write: SingleWrite) -> bool:
        """One conditional single write (merged with the batch's siblings' in a coalescing session): whether it
        applied; an error other than its condition raises as the single call would."""
        (outcome,) = self.db.write_singles([write])
        return outcome.checked().applied

    def _mark_delivered(self, user_id: str, settlement: Settlement) -> None:
        """The rows this run pushed, marked delivered whatever happens to the settlement (a row gone since is
        left gone; a mark that cannot be written leaves the row claimed, never sent again). All of them in one
        request (with the batch's siblings' in a coalescing session), each its own conditional write."""
        marks = delivered_marks(self.space, user_id, settlement.delivered, settlement.delivered_at_ms)
        for outcome in self.db.write_singles(marks) if marks else []:
            if outcome.error is not None and not isinstance(outcome.error, ClientError):
                raise outcome.error

    def _delete_delivered(self, user_id: str, uuid: str, claim_version: int, settlement: Settlement) -> bool:
        """A delivered one-shot: the task deleted (fenced; ``rev`` proves the payload, and so its parts, is the one
        read, else the general path reads the part token first), then its uuid registry entry while it still
        names this task (the claimed row's id), unless the entry expires by itself; in a tenant's space the task,
        its pending count and the entry in one transaction (the count must move with the task). False when the
        task's condition failed.

        Outside a tenant's space the delete is a single write merged with the batch's siblings (a ``DELETE``
        statement) on which a task already gone counts as deleted: its pushes have left, so a cancel that came
        after them, or this delete's own earlier attempt whose answer was lost, reads as delivered
        (docs/decisions.md, 43)."""
        delete: dict[str, Any] = {
            "Key": self._key(user_id, uuid),
            "ConditionExpression": "claim_version = :cv AND rev = :rev",
            "ExpressionAttributeValues": {
                ":cv": claim_version,
                ":rev": settlement.payload_rev if settlement.payload_rev is not None else -1,
            },
        }
        counted = pending.counted(self.space)
        if counted:
            registry = [] if settlement.registry_expires else [registry_delete(self.space, uuid, user_id)]
            try:
                self.db.transact([*self._ending({"Delete": delete}), *registry])
            except TransactionCancelled:
                return False
        elif not self._write_if(SingleWrite("delete", delete, absent_ok=True)):
            return False
        if settlement.payload_token:
            drop_parts(self.db, self.space, user_id, uuid, settlement.payload_token)
        if not counted and settlement.task_id is not None and not settlement.registry_expires:
            # best effort: an entry left behind names a task that is gone, and a create of the uuid takes it over;
            # an entry that expires is left to (docs/decisions.md, 47)
            entry = registry_delete_of(self.space, uuid, user_id, settlement.task_id)
            with contextlib.suppress(ClientError):  # an entry already gone is as good as deleted
                self._write_if(SingleWrite("delete", entry, absent_ok=True))
        return True

    def _ending(self, action: dict[str, Any]) -> list[dict[str, Any]]:
        """The actions of a write that ends a pending task: in a tenant's space the task must still be pending and
        the pending count goes down with it (docs/tenancy.md, limits); elsewhere ``action`` as it is."""
        if not pending.counted(self.space):
            return [action]
        ((kind, body),) = action.items()
        return [{kind: pending.and_pending(body)}, pending.decrement(self.space)]

    def _settle(self, user_id: str, uuid: str, claim_version: int, settlement: Settlement, now_ms: int) -> bool:
        if settlement.delete:
            return self._delete_claimed(user_id, uuid, claim_version)
        with_payload = settlement.encrypted_payload is not None
        if with_payload:
            if self._settle_update(user_id, uuid, claim_version, settlement, now_ms, rewrite_payload=True):
                return True
            current = self.db.get(self._key(user_id, uuid), projection="claim_version")
            if not current or item_int(current.get("claim_version")) != claim_version:
                return False
            # the payload changed since the claim (an update-message): keep it, write the columns only
        return self._settle_update(user_id, uuid, claim_version, settlement, now_ms, rewrite_payload=False)

    def _settle_update_kwargs(
        self, user_id: str, uuid: str, claim_version: int, s: Settlement, now_ms: int
    ) -> dict[str, Any]:
        """The fenced UpdateItem of a settlement that keeps the task (payload untouched)."""
        kwargs, _ = self._settle_update_parts(user_id, uuid, claim_version, s, now_ms, rewrite_payload=False)
        return kwargs

    def _settle_update(
        self, user_id: str, uuid: str, claim_version: int, s: Settlement, now_ms: int, *, rewrite_payload: bool
    ) -> bool:
        kwargs, blob = self._settle_update_parts(
            user_id, uuid, claim_version, s, now_ms, rewrite_payload=rewrite_payload
        )
        if s.status is not None and pending.counted(self.space):
            return self._settle_ending(user_id, uuid, kwargs, blob, rewrite_payload=rewrite_payload)
        if not rewrite_payload:  # no old payload to drop: a single write the batch's siblings' may travel with
            return self._write_if(SingleWrite("update", kwargs))
        kwargs["ReturnValues"] = "ALL_OLD"
        try:
            old = self.db.table.update_item(**kwargs).get("Attributes") or {}
        except ClientError as exc:
            if blob:
                drop_parts(self.db, self.space, user_id, uuid, blob.token)
            if is_conditional_failure(exc):
                return False
            raise
        if rewrite_payload and old.get("payload_token"):
            drop_parts(self.db, self.space, user_id, uuid, str(old["payload_token"]))
        return True

    def _settle_ending(
        self, user_id: str, uuid: str, update: dict[str, Any], blob: Any, *, rewrite_payload: bool
    ) -> bool:
        """A settlement that ends a pending task of a tenant: the update and the pending count in one transaction
        (which returns no old attributes, so a payload about to be replaced has its part token read first)."""
        old = self.db.get(self._key(user_id, uuid), projection="payload_token") if rewrite_payload else None
        try:
            self.db.transact(self._ending({"Update": update}))
        except TransactionCancelled:
            if blob:
                drop_parts(self.db, self.space, user_id, uuid, blob.token)
            return False
        if old and old.get("payload_token"):
            drop_parts(self.db, self.space, user_id, uuid, str(old["payload_token"]))
        return True

    def _settle_update_parts(
        self, user_id: str, uuid: str, claim_version: int, s: Settlement, now_ms: int, *, rewrite_payload: bool
    ) -> tuple[dict[str, Any], Any]:
        sets = ["updated_at = :now", "next_send_at = :nsa"]
        removes = ["lease_until", "lease_owner"]
        next_iso = iso_from_ms(s.next_send_at_ms)
        retry_iso = None if s.retry_after_ms is None else iso_from_ms(s.retry_after_ms)
        values: dict[str, Any] = {":now": iso_from_ms(now_ms), ":nsa": next_iso, ":cv": claim_version}
        names: dict[str, str] = {}
        condition = "claim_version = :cv"
        if s.status is not None:
            names["#st"] = "status"
            sets += ["#st = :status", "ret_pk = :rpk", "ret_sk = :now"]
            values[":status"] = s.status
            values[":rpk"] = self.space.done_pk(uuid, self.due_shards)
            removes += ["due_pk", "due_sk", "retry_after"]
        else:
            eligible = retry_iso or next_iso
            sets.append("due_sk = :dsk")
            values[":dsk"] = keys.due_sk(eligible, uuid)
            if retry_iso:
                sets.append("retry_after = :ra")
                values[":ra"] = retry_iso
            else:
                removes.append("retry_after")
        if s.policy_deferred and retry_iso and s.status is None:
            sets.append("deferred_until = :ra")
        elif not (s.keep_deferral and s.status is None):
            removes.append("deferred_until")
        if s.clear_outbox_ids:
            removes.append("ob_mids")
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
            attrs, blob = payload_attrs(self.db, self.space, user_id, uuid, s.encrypted_payload)
            for name, value in attrs.items():
                sets.append(f"{name} = :{name}")
                values[f":{name}"] = value
            removes += ["payload_token", "payload_parts"] if "payload" in attrs else ["payload"]
            sets.append("rev = rev + :one")
            values[":one"] = 1
            condition += " AND rev = :rev"
            values[":rev"] = s.payload_rev if s.payload_rev is not None else -1
        kwargs: dict[str, Any] = {
            "Key": self._key(user_id, uuid),
            "UpdateExpression": f"SET {', '.join(sets)} REMOVE {', '.join(removes)}",
            "ConditionExpression": condition,
            "ExpressionAttributeValues": values,
        }
        if names:
            kwargs["ExpressionAttributeNames"] = names
        return kwargs, blob

    def _delete_claimed(self, user_id: str, uuid: str, claim_version: int) -> bool:
        if not pending.counted(self.space):
            return delete_with_registry(
                self.db, self.space, user_id, uuid, "claim_version = :cv", {":cv": claim_version}
            )
        return delete_with_registry(
            self.db,
            self.space,
            user_id,
            uuid,
            "claim_version = :cv AND #st = :pst",
            {":cv": claim_version, ":pst": "pending"},
            extra=[pending.decrement(self.space)],
            names={"#st": "status"},
        )

    def delete_settled_before(self, cutoff_ms: int, *, shards: int, limit: int) -> int:
        """Housekeeping: delete sent/failed tasks not updated since ``cutoff_ms`` (bounded per tick)."""
        cutoff_iso = iso_from_ms(cutoff_ms)
        deleted = 0
        for shard in range(shards):
            response = self.db.table.query(
                IndexName="retention",
                KeyConditionExpression="ret_pk = :shard AND ret_sk < :cutoff",
                ExpressionAttributeValues={":shard": self.space.done_shard_pk(shard), ":cutoff": cutoff_iso},
                Limit=max(1, limit - deleted),
            )
            for item in response.get("Items", []):
                user_id, uuid = self.space.parse_task_key(item)
                # the index does not project the payload token; read it so the parts go with the task
                existing = self.db.get(self._key(user_id, uuid), projection="payload_token")
                try:
                    self.db.transact(
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
                            registry_delete(self.space, uuid, user_id),
                        ]
                    )
                    deleted += 1
                except TransactionCancelled:
                    continue
                if existing and existing.get("payload_token"):
                    drop_parts(self.db, self.space, user_id, uuid, str(existing["payload_token"]))
            if deleted >= limit:
                break
        return deleted
