"""The per-user message outbox (see docs/data-model.md and docs/delivery.md).

Item ``U#<uid> / O#<message_id>`` (ids over 1000 UTF-8 bytes are hashed, see :func:`keys.outbox_key`):

* ``id`` — per-user integer from the counter ``U#<uid> / SEQ#outbox``. The counter is compare-and-set
  *inside* the append transaction, so two appends of one user commit one after the other and ids grow in
  commit order: when a reader sees id *n*, every id below *n* is already committed. That makes ``since`` a
  stable cursor: paging never skips a row that commits later.
* ``ob_lsk`` — 16-digit zero-padded id, present only while the row is unacked (sparse LSI
  ``outbox_unacked``, read strongly consistent by ``GET /outbox``).
* ``obt_lsk`` — ``<task_uuid>#<13-digit created ms>#<16-digit id>`` (LSI ``outbox_by_task``) when the row has
  a task uuid, except on the rows to be pushed that a task's one-transaction append writes: that append records
  their message ids on the task (``ob_mids``) instead, and a reader of the task's rows takes both
  (docs/decisions.md, 45).
* ``ttl`` — epoch seconds: ``created + 28 d``; on ack ``min(created + 28 d, ack + 7 d)``. TTL deletion lags,
  so readers also filter ``ttl > now``.
* ``delivered_at`` / ``acked_at`` (ms) — set by a successful push / the client's ack (final);
  ``sending_at`` (ms) and ``sending_cv`` — set by :meth:`DynamoOutboxStore.claim_send` (fenced by the task's
  claim version, which ``sending_cv`` records) so a row is pushed by at most one run; handed back only by that
  claim, and only when its push surely did not go out; ``unconfirmed_at`` (ms) — its push left without an
  answer: the send claim stays for good (docs/delivery.md).
* ``payload`` — storage ciphertext of the push JSON; above :data:`INLINE_CHARS` it is split across
  ``OP#…`` part items written before the row (they carry the row's ttl, so nothing is orphaned for good).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from amsg.adapters.dynamo import keys
from amsg.adapters.dynamo.compact import pack, unpack
from amsg.adapters.dynamo.counters import cas_attempts, read_counter, set_counter
from amsg.adapters.dynamo.outbox_sending import OutboxSendClaims, claim_check
from amsg.adapters.dynamo.owners import GuardSet, owner_sets, raise_if_guard_failed
from amsg.adapters.dynamo.table import (
    INLINE_CHARS,
    BlobRef,
    DynamoTable,
    TransactionCancelled,
    is_conditional_failure,
    item_int,
)
from amsg.errors import ClaimLost, CloudGuardError, StoreUnavailable
from amsg.ports import ClaimFence, OutboxAppend, OutboxRow

DAY_MS = 86_400_000
RETENTION_MS = 28 * DAY_MS  # any row, after creation
ACKED_RETENTION_MS = 7 * DAY_MS  # acked rows, after the ack
# One transaction: the counter + 99 rows, and stay well below the 4 MB request limit.
MAX_ROWS_PER_TRANSACTION = 99
MAX_TRANSACTION_CHARS = 3_000_000
APPEND_ATTEMPTS = 40
ID_DIGITS = 16
MAX_ID = 10**ID_DIGITS - 1

_NAMES = {"#ttl": "ttl"}
# a row nobody received (the API's discard: the user cancelled, so a row claimed for sending goes too)
_UNDELIVERED = "attribute_exists(SK) AND attribute_not_exists(delivered_at) AND attribute_not_exists(acked_at)"
# a row nobody took for sending, pushed or acked: the only kind a run's (fenced) discard may delete
_UNTOUCHED = f"{_UNDELIVERED} AND attribute_not_exists(sending_at)"
_DISCARD_FIELDS = "PK, SK, id, created_at, task_uuid, message_id, payload_token, sending_at, delivered_at, acked_at"


def _pad(n: int) -> str:
    return f"{n:0{ID_DIGITS}d}"


def _ttl_for(created_ms: int) -> int:
    return (created_ms + RETENTION_MS) // 1000


def _task_lsk(task_uuid: str, created_ms: int, row_id: int) -> str:
    return f"{task_uuid}#{max(0, created_ms):013d}#{_pad(row_id)}"


def _distinct(ids: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(i for i in ids if isinstance(i, str)))


def _payload_attrs(row: OutboxAppend, blob: BlobRef | None) -> dict[str, Any]:
    if blob is None:
        return {"payload": pack(row.encrypted_push)}
    return {"payload_token": blob.token, "payload_parts": blob.parts}


def new_row_put(
    key: dict[str, str],
    row: OutboxAppend,
    row_id: int,
    blob: BlobRef | None = None,
    *,
    sending_at: int | None = None,
    sending_cv: int | None = None,
    by_task_index: bool = True,
) -> dict[str, Any]:
    """The ``Put`` of a new outbox row (only if no row has that id yet); ``sending_at`` claims it for sending
    in the same write, for the claim ``sending_cv`` (the first push is appended and claimed in one transaction).
    Without ``by_task_index`` the row gets no ``outbox_by_task`` entry: the task names it instead."""
    item: dict[str, Any] = {
        **key,
        "id": row_id,
        "message_id": row.message_id,
        **_payload_attrs(row, blob),
        "created_at": row.created_at,
        "rev": 1,
        "ttl": _ttl_for(row.created_at),
        "ob_lsk": _pad(row_id),
    }
    optional = {
        "task_uuid": row.task_uuid,
        "session_id": row.session_id,
        "message_index": row.message_index,
        "total_messages": row.total_messages,
        "sending_at": sending_at,
        "sending_cv": sending_cv if sending_at is not None else None,
    }
    item.update({name: value for name, value in optional.items() if value is not None})
    if row.task_uuid is not None and by_task_index:
        item["obt_lsk"] = _task_lsk(row.task_uuid, row.created_at, row_id)
    item.update(owner_sets(row.owner))
    return {"Item": item, "ConditionExpression": "attribute_not_exists(SK)"}


def fits_one_transaction(rows: Sequence[OutboxAppend], spare: int = 0) -> bool:
    """Whether a batch can be appended with inline payloads in one transaction next to the counter and task
    (and ``spare`` more actions)."""
    return (
        0 < len(rows) <= MAX_ROWS_PER_TRANSACTION - 1 - spare
        and all(len(row.encrypted_push) <= INLINE_CHARS for row in rows)
        and sum(len(row.encrypted_push) + len(row.message_id) + 512 for row in rows) <= MAX_TRANSACTION_CHARS
        and len({row.message_id for row in rows}) == len(rows)
    )


@dataclass
class _AppendPlan:
    """One read-decide round of an append: the transaction's actions and what it supersedes if it commits."""

    actions: list[dict[str, Any]] = field(default_factory=list)
    ids: dict[str, int] = field(default_factory=dict)  # message id -> row id
    replaced: list[dict[str, Any]] = field(default_factory=list)  # unacked rows whose payload parts go
    used: set[str] = field(default_factory=set)  # message ids whose new parts the actions reference


class DynamoOutboxStore(OutboxSendClaims):
    def __init__(self, table: DynamoTable, *, space: keys.KeySpace = keys.SINGLE) -> None:
        self.db = table
        self.space = space

    # ---- mapping ----------------------------------------------------------------------------------------

    def _row(self, item: dict[str, Any]) -> OutboxRow:
        payload = unpack(item.get("payload"))
        if payload is None and item.get("payload_token"):
            payload = self.db.read_blob(
                item["PK"],
                keys.outbox_part_prefix(item["message_id"]),
                BlobRef(str(item["payload_token"]), item_int(item.get("payload_parts"))),
            )
        return OutboxRow(
            id=item_int(item.get("id")),
            message_id=item["message_id"],
            encrypted_push=payload,
            created_at=item_int(item.get("created_at")),
            task_uuid=item.get("task_uuid"),
            session_id=item.get("session_id"),
            message_index=item_int(item.get("message_index"), None),
            total_messages=item_int(item.get("total_messages"), None),
            delivered_at=item_int(item.get("delivered_at"), None),
            acked_at=item_int(item.get("acked_at"), None),
            sending_at=item_int(item.get("sending_at"), None),
            sending_cv=item_int(item.get("sending_cv"), None),
            unconfirmed_at=item_int(item.get("unconfirmed_at"), None),
        )

    def _write_parts(self, pk: str, message_id: str, text: str, ttl: int) -> BlobRef:
        return self.db.write_blob(pk, keys.outbox_part_prefix(message_id), text, ttl=ttl)

    def _drop_parts(self, pk: str, message_id: str, token: str) -> None:
        """Best effort: unreferenced parts also expire with their ttl."""
        with contextlib.suppress(ClientError):
            self.db.delete_blob(pk, keys.outbox_part_prefix(message_id), token)

    def _drop_parts_of(self, item: dict[str, Any] | None) -> None:
        if item and item.get("payload_token") and item.get("message_id") is not None:
            self._drop_parts(item["PK"], item["message_id"], str(item["payload_token"]))

    def _batch_get(self, item_keys: list[dict[str, str]]) -> dict[str, dict[str, Any]]:
        """Consistent reads of one user's rows, keyed by SK."""
        return {sk: item for (_, sk), item in self.db.batch_get(item_keys).items()}

    # ---- engine-facing ----------------------------------------------------------------------------------

    def append(self, user_id: str, rows: Sequence[OutboxAppend], *, fence: ClaimFence | None = None) -> list[int]:
        merged: dict[str, OutboxAppend] = {}
        for row in rows:
            merged[row.message_id] = row  # a repeated id keeps its first position and takes the last content
        ids: dict[str, int] = {}
        for chunk in self._chunks(list(merged.values()), spare=0 if fence is None else 1):
            ids.update(self._append_chunk(user_id, chunk, fence))
        return [ids[row.message_id] for row in rows]

    @staticmethod
    def _chunks(rows: list[OutboxAppend], spare: int = 0) -> Iterable[list[OutboxAppend]]:
        """Transactions of at most 100 actions: the counter, the rows, each owner's check and ``spare`` more (a
        run's claim check)."""
        chunk: list[OutboxAppend] = []
        size = 0
        owners = {row.owner.ref for row in rows if row.owner is not None}
        max_rows = MAX_ROWS_PER_TRANSACTION - len(owners) - spare  # each owner's check is one more action
        for row in rows:
            cost = min(len(row.encrypted_push), INLINE_CHARS) + len(row.message_id) + 512
            if chunk and (len(chunk) >= max_rows or size + cost > MAX_TRANSACTION_CHARS):
                yield chunk
                chunk, size = [], 0
            chunk.append(row)
            size += cost
        if chunk:
            yield chunk

    def _append_chunk(self, user_id: str, chunk: list[OutboxAppend], fence: ClaimFence | None) -> dict[str, int]:
        pk = self.space.user_pk(user_id)
        blobs: dict[str, BlobRef] = {}
        for row in chunk:
            if len(row.encrypted_push) > INLINE_CHARS:
                blobs[row.message_id] = self._write_parts(
                    pk, row.message_id, row.encrypted_push, _ttl_for(row.created_at)
                )
        for _ in cas_attempts(APPEND_ATTEMPTS):  # the per-user counter moved under us: back off, read again
            plan = self._plan_append(user_id, chunk, blobs)
            if plan.actions and not self._commit_append(user_id, chunk, plan.actions, blobs, fence):
                continue  # the counter moved or a row changed under us: read again
            for old in plan.replaced:
                self._drop_parts_of(old)
            for message_id, blob in blobs.items():
                if message_id not in plan.used:
                    self._drop_parts(pk, message_id, blob.token)
            return plan.ids
        # nothing of this chunk committed; parts written for it are unreferenced (their ttl would also get them)
        for message_id, blob in blobs.items():
            self._drop_parts(pk, message_id, blob.token)
        raise StoreUnavailable("outbox append kept conflicting")

    def _plan_append(self, user_id: str, chunk: list[OutboxAppend], blobs: dict[str, BlobRef]) -> _AppendPlan:
        """Read the rows and the per-user id counter, then the actions: new rows take the next ids, unacked
        rows are replaced in place, acked rows are final; the counter moves only if it still holds what was read."""
        counter_key = self.space.counter_key(user_id, "outbox")
        existing = self._batch_get([self.space.outbox_key(user_id, row.message_id) for row in chunk])
        current = read_counter(self.db, counter_key)
        next_id = current
        plan = _AppendPlan()
        for row in chunk:
            key = self.space.outbox_key(user_id, row.message_id)
            old = existing.get(key["SK"])
            blob = blobs.get(row.message_id)
            if old is None:
                next_id += 1
                plan.ids[row.message_id] = next_id
                plan.actions.append({"Put": self._put_new(key, row, next_id, blob)})
            elif old.get("acked_at") is not None:
                plan.ids[row.message_id] = item_int(old.get("id"))  # final: never revived
                continue
            else:
                plan.ids[row.message_id] = item_int(old.get("id"))
                plan.actions.append({"Update": self._update_unacked(key, row, old, blob)})
                if old.get("payload_token"):
                    plan.replaced.append(old)
            if blob is not None:
                plan.used.add(row.message_id)
        if next_id > current:
            plan.actions.insert(0, set_counter(counter_key, current, next_id))
        return plan

    def _commit_append(
        self,
        user_id: str,
        chunk: list[OutboxAppend],
        actions: list[dict[str, Any]],
        blobs: dict[str, BlobRef],
        fence: ClaimFence | None = None,
    ) -> bool:
        """One transaction with the owners' guards (and a run's claim check); False when a condition failed (read
        again). A failed guard or claim drops the chunk's parts and raises."""
        guards = GuardSet(self.space)
        for row in chunk:
            if row.owner is not None:  # rows of an owned task commit only while its owner holds
                guards.add(row.owner.ref, row.owner.generation)
        checks = guards.actions(user_id)
        if fence is not None:
            checks.append(claim_check(self.space, user_id, fence.task_uuid, fence.claim_version, fence.now_ms))
        try:
            self.db.transact(actions + checks)
        except TransactionCancelled as cancelled:
            try:
                raise_if_guard_failed(cancelled, len(actions), len(guards))
                if fence is not None and cancelled.failed(len(actions) + len(guards)):
                    raise ClaimLost("the task claim fencing this append is gone")
            except (CloudGuardError, ClaimLost):
                for message_id, blob in blobs.items():
                    self._drop_parts(self.space.user_pk(user_id), message_id, blob.token)
                raise
            return False
        return True

    def _payload_attrs(self, row: OutboxAppend, blob: BlobRef | None) -> dict[str, Any]:
        return _payload_attrs(row, blob)

    def _put_new(self, key: dict[str, str], row: OutboxAppend, row_id: int, blob: BlobRef | None) -> dict[str, Any]:
        return new_row_put(key, row, row_id, blob)

    def _update_unacked(
        self, key: dict[str, str], row: OutboxAppend, old: dict[str, Any], blob: BlobRef | None
    ) -> dict[str, Any]:
        """The reference's upsert: payload and created_at replaced, delivered_at cleared; id and the task
        identity columns stay as first written."""
        values: dict[str, Any] = {
            ":c": row.created_at,
            ":ttl": _ttl_for(row.created_at),
            ":one": 1,
            ":rev": old.get("rev", 0),
        }
        sets = ["created_at = :c", "#ttl = :ttl", "rev = rev + :one"]
        removes = ["delivered_at", "sending_at", "sending_cv", "unconfirmed_at"]
        for name, value in self._payload_attrs(row, blob).items():
            sets.append(f"{name} = :{name}")
            values[f":{name}"] = value
        removes += ["payload_token", "payload_parts"] if blob is None else ["payload"]
        old_task = old.get("task_uuid")
        if old_task is not None:
            sets.append("obt_lsk = :obt")
            values[":obt"] = _task_lsk(old_task, row.created_at, item_int(old.get("id")))
        return {
            "Key": key,
            "UpdateExpression": f"SET {', '.join(sets)} REMOVE {', '.join(removes)}",
            "ConditionExpression": "attribute_exists(SK) AND attribute_not_exists(acked_at) AND rev = :rev",
            "ExpressionAttributeNames": dict(_NAMES),
            "ExpressionAttributeValues": values,
        }

    def _delete_undelivered(self, key: dict[str, str]) -> bool:
        try:
            result = self.db.table.delete_item(Key=key, ConditionExpression=_UNDELIVERED, ReturnValues="ALL_OLD")
        except ClientError as exc:
            if not is_conditional_failure(exc):
                raise
            return False
        self._drop_parts_of(result.get("Attributes"))
        return True

    def _delete_fenced(self, item: dict[str, Any], user_id: str, task_uuid: str, claim_version: int) -> bool:
        """Delete an untouched row only while the task carries ``claim_version`` and is no longer pending (the
        run that holds that claim ended it): one transaction, so a claim taken meanwhile keeps the row."""
        fence = {
            "ConditionCheck": {
                "Key": {"PK": self.space.user_pk(user_id), "SK": keys.task_sk(task_uuid)},
                "ConditionExpression": "claim_version = :cv AND #st <> :pending",
                "ExpressionAttributeNames": {"#st": "status"},
                "ExpressionAttributeValues": {":cv": claim_version, ":pending": "pending"},
            }
        }
        key = {"PK": item["PK"], "SK": item["SK"]}
        try:
            self.db.transact([{"Delete": {"Key": key, "ConditionExpression": _UNTOUCHED}}, fence])
        except TransactionCancelled:
            return False
        self._drop_parts_of(item)  # the query read its part token: an untaken row is never rewritten
        return True

    def discard_undelivered(self, user_id: str, message_ids: Sequence[str]) -> int:
        return sum(
            1
            for message_id in _distinct(message_ids)
            if self._delete_undelivered(self.space.outbox_key(user_id, message_id))
        )

    def _task_items(
        self,
        user_id: str,
        task_uuid: str,
        *,
        since_ms: int = 0,
        limit: int | None = None,
        projection: str = "",
        named: Sequence[str] = (),
    ) -> list[dict[str, Any]]:
        """The task's rows (consistent), ordered by (created_at, id): those of LSI ``outbox_by_task`` and those
        the task names by message id (``named``, read by key: they have no entry in the index)."""
        pk = self.space.user_pk(user_id)
        low = f"{task_uuid}#{max(0, since_ms):013d}#"
        high = f"{task_uuid}#~"  # '~' sorts after every digit
        kwargs: dict[str, Any] = {
            "IndexName": "outbox_by_task",
            "KeyConditionExpression": "PK = :pk AND obt_lsk BETWEEN :low AND :high",
            "ExpressionAttributeValues": {":pk": pk, ":low": low, ":high": high},
            "ConsistentRead": True,
        }
        if projection:
            kwargs["ProjectionExpression"] = projection
        found: dict[str, dict[str, Any]] = {}
        for item in self.db.query_all(**kwargs):
            # another task's uuid may extend this one ("a" vs "a#1"): keep exact matches only
            if item.get("task_uuid") == task_uuid:
                found[item["SK"]] = item
                if limit is not None and len(found) >= limit:
                    break  # the index is in (created_at, id) order: what follows cannot be among the first
        if named:
            by_key = self._batch_get([self.space.outbox_key(user_id, message_id) for message_id in _distinct(named)])
            for sk, item in by_key.items():
                if item.get("task_uuid") == task_uuid and item_int(item.get("created_at")) >= since_ms:
                    found.setdefault(sk, item)
        out = sorted(found.values(), key=lambda item: (item_int(item.get("created_at")), item_int(item.get("id"))))
        return out if limit is None else out[:limit]

    def discard_undelivered_for_task(
        self, user_id: str, task_uuid: str, *, claim_version: int | None = None, named: Sequence[str] = ()
    ) -> int:
        """Delete the task's rows nobody has received (the API); a run's: only untaken rows, fenced."""
        rows = self._task_items(
            user_id,
            task_uuid,
            projection=_DISCARD_FIELDS,
            named=named,
        )
        if claim_version is None:
            return sum(1 for row in rows if self._delete_undelivered({"PK": row["PK"], "SK": row["SK"]}))
        taken = ("sending_at", "delivered_at", "acked_at")
        untouched = [row for row in rows if all(row.get(name) is None for name in taken)]
        return sum(1 for row in untouched if self._delete_fenced(row, user_id, task_uuid, claim_version))

    def list_for_task(
        self, user_id: str, task_uuid: str, *, since_ms: int = 0, limit: int = 500, named: Sequence[str] = ()
    ) -> list[OutboxRow]:
        items = self._task_items(user_id, task_uuid, since_ms=since_ms, limit=limit, named=named)
        return [self._row(item) for item in items]

    # ---- API-facing -------------------------------------------------------------------------------------

    def list_unacked(self, user_id: str, since: int, limit: int, now_ms: int) -> list[OutboxRow]:
        if limit <= 0 or since >= MAX_ID:
            return []
        kwargs: dict[str, Any] = {
            "IndexName": "outbox_unacked",
            "KeyConditionExpression": "PK = :pk AND ob_lsk > :since",
            "FilterExpression": "#ttl > :now_s",
            "ExpressionAttributeNames": {"#ttl": "ttl"},
            "ExpressionAttributeValues": {
                ":pk": self.space.user_pk(user_id),
                ":since": _pad(max(0, since)),
                ":now_s": now_ms // 1000,
            },
            "ConsistentRead": True,
        }
        items: list[dict[str, Any]] = []
        # Limit applies before the filter: keep reading pages until `limit` rows passed it
        while len(items) < limit:
            page = self.db.table.query(Limit=limit - len(items), **kwargs)
            items.extend(page.get("Items", []))
            last = page.get("LastEvaluatedKey")
            if not last:
                break
            kwargs["ExclusiveStartKey"] = last
        return [self._row(item) for item in items[:limit]]

    def ack(self, user_id: str, message_ids: Sequence[str], now_ms: int) -> int:
        acked_ttl = (now_ms + ACKED_RETENTION_MS) // 1000
        now_s = now_ms // 1000
        newly = 0
        for message_id in _distinct(message_ids):
            key = self.space.outbox_key(user_id, message_id)
            # common case: the ack comes within 21 days of creation, so ack + 7 d is the earlier expiry
            if self._try_ack(key, now_ms, "AND #ttl > :a7", {":a7": acked_ttl}, set_ttl=acked_ttl):
                newly += 1
                continue
            current = self.db.table.get_item(
                Key=key,
                ConsistentRead=True,
                ProjectionExpression="acked_at, #ttl",
                ExpressionAttributeNames=dict(_NAMES),
            ).get("Item")
            if current is None or current.get("acked_at") is not None:
                continue
            if self._try_ack(key, now_ms, "AND #ttl > :now AND #ttl <= :a7", {":now": now_s, ":a7": acked_ttl}):
                newly += 1
        return newly

    def _try_ack(
        self, key: dict[str, str], now_ms: int, extra: str, values: dict[str, Any], set_ttl: int | None = None
    ) -> bool:
        update = "SET acked_at = :t" + (", #ttl = :newttl" if set_ttl is not None else "") + " REMOVE ob_lsk"
        all_values = {":t": now_ms, **values}
        if set_ttl is not None:
            all_values[":newttl"] = set_ttl
        try:
            self.db.table.update_item(
                Key=key,
                UpdateExpression=update,
                ConditionExpression=f"attribute_exists(SK) AND attribute_not_exists(acked_at) {extra}",
                ExpressionAttributeNames=dict(_NAMES),
                ExpressionAttributeValues=all_values,
            )
        except ClientError as exc:
            if not is_conditional_failure(exc):
                raise
            return False
        return True

    def delete(self, user_id: str, message_ids: Sequence[str] | None, now_ms: int | None = None) -> int:
        def live(item: dict[str, Any] | None) -> bool:
            if not item:
                return False
            ttl = item_int(item.get("ttl"), None)
            return now_ms is None or ttl is None or ttl > now_ms // 1000

        if message_ids is None:
            pk = self.space.user_pk(user_id)
            rows = list(
                self.db.query_prefix(
                    pk, keys.OUTBOX_PREFIX, ProjectionExpression="PK, SK, #ttl", ExpressionAttributeNames=dict(_NAMES)
                )
            )
            parts = list(self.db.query_prefix(pk, keys.OUTBOX_PART_PREFIX, ProjectionExpression="PK, SK"))
            self.db.batch_delete({"PK": item["PK"], "SK": item["SK"]} for item in rows + parts)
            return sum(1 for item in rows if live(item))
        deleted = 0
        for message_id in _distinct(message_ids):
            result = self.db.table.delete_item(Key=self.space.outbox_key(user_id, message_id), ReturnValues="ALL_OLD")
            old = result.get("Attributes")
            self._drop_parts_of(old)
            if live(old):
                deleted += 1
        return deleted
