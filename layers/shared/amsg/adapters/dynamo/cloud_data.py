"""Cloud-data management in DynamoDB: everything one user stores, read as logical resources, and the
management records (paging snapshots) kept for the ``/cloud-data`` routes (see docs/data-model.md).

Resources are read straight from the user's partition with strongly consistent queries (tasks ``T#``, client
state roots ``S#``, credentials ``C#``, outbox rows ``O#``) and one read of the push subscription; a source that
cannot be read contributes nothing and a ``READ_FAILED`` gap. Value parts (``TP#``, ``SC#``, ``OP#``) belong to
the resource whose item references them and are never resources of their own.

Records: ``R#<kind>#<id>`` with ``data`` (the encrypted JSON), ``updated_at`` (ms) and a ``ttl`` (DynamoDB's
TTL removes expired records; readers given ``now_ms`` treat them as absent before that). Cleanup operations also
carry a lease (``lease_token``, ``lease_until`` ms) and, while not finished, the keys of the ``work`` index
(``work_pk = WORK#operation``, ``work_sk`` = the time they are next due, padded): the next attempt, or the end
of the current lease so that a dead worker's operation becomes due again by itself.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from botocore.exceptions import ClientError

from amsg import jsonio
from amsg.adapters.dynamo import keys, pending
from amsg.adapters.dynamo.client_state import root_sk, value_parts_prefix
from amsg.adapters.dynamo.compact import unpack
from amsg.adapters.dynamo.owners import owner_key
from amsg.adapters.dynamo.table import (
    INLINE_CHARS,
    BlobRef,
    DynamoTable,
    TransactionCancelled,
    is_conditional_failure,
)
from amsg.adapters.dynamo.tasks import registry_delete
from amsg.errors import LeaseLost, OwnerChanged
from amsg.observability import logger
from amsg.ports import LeasedWrite, ResourceListing, StoredResource
from amsg.timeutil import parse_iso_ms

RECORD_PREFIX = "R#"
# A record too large for one item (a paging snapshot or a plan of a user with thousands of resources) keeps its
# data in part items "RP#<kind>#<id>#<token>#<n>" (never under the "R#<kind>#" listing prefix); parts carry a TTL
# past any record's life, so a part left by a crash between writes expires.
RECORD_PART_PREFIX = "RP#"
RECORD_PART_TTL_S = 32 * 86_400
READ_FAILED = "Cloud storage source could not be read"


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, Decimal)) else None


def _ms(value: Any) -> int | None:
    if isinstance(value, (int, Decimal)):
        return int(value)
    if isinstance(value, str):
        return parse_iso_ms(value)
    return None


def _latest(*values: Any) -> int | None:
    found = [ms for ms in (_ms(v) for v in values) if ms is not None]
    return max(found) if found else None


def _size(*texts: Any) -> int:
    return sum(len(t.encode("utf-8", "surrogatepass")) for t in texts if isinstance(t, str))


def _version(items: list[dict[str, Any]]) -> str:
    """A hash of the physical snapshot (keys, ``rev``, ownership record): any write to the resource changes it."""
    snapshot = [
        {
            "PK": i["PK"],
            "SK": i["SK"],
            "rev": _int(i.get("rev")),
            "meta": i.get("cloud_meta"),
            "at": str(i.get("updated_at")),
        }
        for i in items
    ]
    return hashlib.sha256(jsonio.dumps(snapshot).encode("utf-8", "surrogatepass")).hexdigest()


def _owned(item: dict[str, Any]) -> dict[str, Any]:
    return {"owner_ref": item.get("owner_ref"), "cloud_meta": item.get("cloud_meta")}


class DynamoCloudDataStore:
    def __init__(self, table: DynamoTable, *, space: keys.KeySpace = keys.SINGLE) -> None:
        self.db = table
        self.space = space

    # ---- inventory source -------------------------------------------------------------------------------

    def list_resources(self, user_id: str) -> ResourceListing:
        pk = self.space.user_pk(user_id)
        listing = ResourceListing()
        readers: tuple[tuple[str, Callable[[], list[StoredResource]]], ...] = (
            ("task", lambda: self._tasks(pk)),
            ("state", lambda: self._state(pk)),
            ("credential", lambda: self._credentials(pk)),
            ("outbox", lambda: self._outbox(pk)),
            ("subscription", lambda: self._subscription(user_id)),
        )
        for source, read in readers:
            try:
                listing.resources.extend(read())
            except Exception as exc:  # one unreadable source never hides the others
                logger.warning("cloud inventory source failed", extra={"source": source, "error": type(exc).__name__})
                listing.gaps.append({"source": source, "code": "READ_FAILED", "message": READ_FAILED})
        return listing

    def _tasks(self, pk: str) -> list[StoredResource]:
        out = []
        for item in self.db.query_prefix(pk, keys.TASK_PREFIX):
            payload = unpack(item.get("payload"))
            if payload is None and item.get("payload_token"):
                payload = self.db.read_blob(
                    pk,
                    keys.task_part_prefix(item["uuid"]),
                    BlobRef(str(item["payload_token"]), _int(item.get("payload_parts")) or 0),
                )
            out.append(
                StoredResource(
                    type="task",
                    identity=[item["uuid"]],
                    byte_size=_size(payload),
                    updated_at=_latest(item.get("updated_at"), item.get("created_at")),
                    status=str(item.get("status", "pending")),
                    payload=payload,
                    version=_version([item]),
                    rev=_int(item.get("rev")),
                    **_owned(item),
                )
            )
        return out

    def _state(self, pk: str) -> list[StoredResource]:
        out = []
        for item in self.db.query_prefix(pk, "S#"):
            value = item.get("value")
            size = _int(item.get("ref_bytes"))
            out.append(
                StoredResource(
                    type="state",
                    identity=[item["ns"], item["key"]],  # a root item always carries both
                    byte_size=size if size is not None else _size(value),
                    updated_at=_ms(item.get("updated_at")),
                    status=None,
                    version=_version([item]),
                    rev=_int(item.get("rev")),
                    **_owned(item),
                )
            )
        return out

    def _credentials(self, pk: str) -> list[StoredResource]:
        return [
            StoredResource(
                type="credential",
                identity=[item["cred_id"]],
                byte_size=_size(item.get("encrypted_value")),
                updated_at=_latest(item.get("updated_at"), item.get("created_at")),
                status=None,
                version=_version([item]),
                rev=_int(item.get("rev")),
                **_owned(item),
            )
            for item in self.db.query_prefix(pk, keys.CREDENTIAL_PREFIX)
        ]

    def _outbox(self, pk: str) -> list[StoredResource]:
        out = []
        for item in self.db.query_prefix(pk, keys.OUTBOX_PREFIX):
            payload = unpack(item.get("payload"))
            if payload is None and item.get("payload_token"):
                payload = self.db.read_blob(
                    pk,
                    keys.outbox_part_prefix(item["message_id"]),
                    BlobRef(str(item["payload_token"]), _int(item.get("payload_parts")) or 0),
                )
            status = "acked" if item.get("acked_at") is not None else "pending"
            if status == "pending" and item.get("delivered_at") is not None:
                status = "delivered"
            out.append(
                StoredResource(
                    type="outbox",
                    identity=[item["message_id"]],
                    byte_size=_size(payload),
                    updated_at=_latest(item.get("created_at"), item.get("delivered_at"), item.get("acked_at")),
                    status=status,
                    payload=payload,
                    task_uuid=item.get("task_uuid"),
                    version=_version([item]),
                    rev=_int(item.get("rev")),
                    **_owned(item),
                )
            )
        return out

    def _subscription(self, user_id: str) -> list[StoredResource]:
        item = self.db.get(self.space.push_key(user_id))
        if not item:
            return []
        return [
            StoredResource(
                type="subscription",
                identity=[user_id],
                byte_size=_size(item.get("subscription")),
                updated_at=_ms(item.get("updated_at")),
                status="registered",
                version=_version([item]),
                rev=_int(item.get("rev")),
                **_owned(item),
            )
        ]

    # ---- deletion (cleanup) ------------------------------------------------------------------------------

    def delete_resource(self, user_id: str, resource: StoredResource, progress: LeasedWrite | None = None) -> bool:
        """Delete one logical resource with every item it owns (parts, the task's uuid registry entry), only
        while it is still the version that was listed; False when it changed (or is already gone).

        With ``progress`` the delete and the operation's progress write are one transaction that also checks the
        operation's lease: a worker that lost the lease deletes nothing (:class:`LeaseLost`), and a resource is
        never deleted without its count being recorded."""
        pk = self.space.user_pk(user_id)
        ident = str(resource.identity[0])
        rev_cond, rev_values = _rev_condition(resource.rev)
        parts: tuple[str, str] | None = None
        if resource.type == "task":
            key = self.space.task_key(user_id, ident)
            token = (self.db.get(key, projection="payload_token") or {}).get("payload_token")
            parts = (keys.task_part_prefix(ident), str(token)) if token else None
            actions = [
                *_task_delete(self.space, key, resource, rev_cond, rev_values),
                registry_delete(self.space, ident, user_id),
            ]
        elif resource.type == "state":
            namespace, key_part = ident, str(resource.identity[1])
            key = {"PK": pk, "SK": root_sk(namespace, key_part)}
            token = (self.db.get(key, projection="blob_token") or {}).get("blob_token")
            parts = (value_parts_prefix(namespace, key_part), str(token)) if token else None
            actions = [_delete(key, rev_cond, rev_values)]
        elif resource.type == "credential":
            actions = [_delete(self.space.credential_key(user_id, ident), rev_cond, rev_values)]
        elif resource.type == "outbox":
            key = self.space.outbox_key(user_id, ident)
            token = (self.db.get(key, projection="payload_token") or {}).get("payload_token")
            parts = (keys.outbox_part_prefix(ident), str(token)) if token else None
            actions = [_delete(key, rev_cond, rev_values)]
        else:
            actions = [_delete(self.space.push_key(user_id), rev_cond, rev_values)]
        if progress is not None:
            actions.append(self._leased_update(user_id, progress))
        try:
            self.db.transact(actions)
        except TransactionCancelled as cancelled:
            if progress is not None and cancelled.failed(len(actions) - 1):
                raise LeaseLost(progress.record_id) from None
            return False
        if parts is not None:
            with contextlib.suppress(ClientError):  # unreferenced parts are harmless (and expire)
                self.db.delete_blob(pk, parts[0], parts[1])
        return True

    # ---- management records -----------------------------------------------------------------------------

    def _record_key(self, user_id: str, kind: str, record_id: str) -> dict[str, str]:
        return {"PK": self.space.user_pk(user_id), "SK": f"{RECORD_PREFIX}{kind}#{record_id}"}

    def put_record(
        self,
        user_id: str,
        kind: str,
        record_id: str,
        data: str,
        *,
        now_ms: int,
        ttl_s: int | None,
        create_only: bool = False,
        work_at: int | None = None,
    ) -> bool:
        item: dict[str, Any] = {**self._record_key(user_id, kind, record_id), "updated_at": now_ms}
        item.update(self._data_attrs(user_id, kind, record_id, data, now_ms))
        if ttl_s is not None:
            item["ttl"] = now_ms // 1000 + ttl_s
        if work_at is not None:
            item.update(_work_keys(self.space, kind, work_at))
        condition: dict[str, Any] = {}
        if create_only:  # an expired record (not yet removed by TTL) counts as absent
            condition = {
                "ConditionExpression": "attribute_not_exists(SK) OR #ttl <= :now_s",
                "ExpressionAttributeNames": {"#ttl": "ttl"},
                "ExpressionAttributeValues": {":now_s": now_ms // 1000},
            }
        try:
            old = self.db.table.put_item(Item=item, ReturnValues="ALL_OLD", **condition).get("Attributes") or {}
        except ClientError as exc:
            self._drop_parts(user_id, kind, record_id, item.get("data_token"))
            if is_conditional_failure(exc):
                return False
            raise
        self._drop_parts(user_id, kind, record_id, old.get("data_token"))
        return True

    def _data_attrs(self, user_id: str, kind: str, record_id: str, data: str, now_ms: int) -> dict[str, Any]:
        """The attributes that hold ``data``: inline, or a pointer to part items written first."""
        if len(data) <= INLINE_CHARS:
            return {"data": data}
        prefix = _part_prefix(self._record_key(user_id, kind, record_id)["SK"])
        blob = self.db.write_blob(self.space.user_pk(user_id), prefix, data, ttl=now_ms // 1000 + RECORD_PART_TTL_S)
        return {"data_token": blob.token, "data_parts": blob.parts}

    def _data_of(self, item: dict[str, Any]) -> str | None:
        if "data" in item:
            return str(item["data"])
        token = item.get("data_token")
        if not token:
            return None
        prefix = _part_prefix(str(item["SK"]))
        return self.db.read_blob(str(item["PK"]), prefix, BlobRef(str(token), _int(item.get("data_parts")) or 0))

    def _drop_parts(self, user_id: str, kind: str, record_id: str, token: Any) -> None:
        if token:
            with contextlib.suppress(ClientError):  # unreferenced parts are harmless (and expire)
                key = self._record_key(user_id, kind, record_id)
                self.db.delete_blob(key["PK"], _part_prefix(key["SK"]), str(token))

    def set_record_ttl(self, user_id: str, kind: str, record_id: str, *, now_ms: int, ttl_s: int) -> None:
        """Start the expiry of an existing record (nothing when it is gone)."""
        try:
            self.db.table.update_item(
                Key=self._record_key(user_id, kind, record_id),
                UpdateExpression="SET #ttl = :ttl",
                ConditionExpression="attribute_exists(SK)",
                ExpressionAttributeNames={"#ttl": "ttl"},
                ExpressionAttributeValues={":ttl": now_ms // 1000 + ttl_s},
            )
        except ClientError as exc:
            if not is_conditional_failure(exc):
                raise

    def delete_record(self, user_id: str, kind: str, record_id: str) -> None:
        old = self.db.table.delete_item(Key=self._record_key(user_id, kind, record_id), ReturnValues="ALL_OLD")
        self._drop_parts(user_id, kind, record_id, (old.get("Attributes") or {}).get("data_token"))

    def get_record(self, user_id: str, kind: str, record_id: str, *, now_ms: int | None = None) -> str | None:
        """The record's data; an expired record (TTL deletion lags) reads as absent when ``now_ms`` is given."""
        item = self.db.get(self._record_key(user_id, kind, record_id))
        if not item or not _live(item, now_ms):
            return None
        return self._data_of(item)

    def list_records(self, user_id: str, kind: str, *, now_ms: int | None = None) -> list[str]:
        prefix = f"{RECORD_PREFIX}{kind}#"
        found = (
            self._data_of(item)
            for item in self.db.query_prefix(self.space.user_pk(user_id), prefix)
            if _live(item, now_ms)
        )
        return [data for data in found if data]

    # ---- leases and the work index (cleanup operations) ----------------------------------------------------

    def claim_record(self, user_id: str, kind: str, record_id: str, token: str, *, now_ms: int, lease_ms: int) -> bool:
        """Take the record's lease iff it is free or expired; the record stays due (work index) at the lease's
        end, so a worker that dies is replaced by a later tick."""
        until = now_ms + lease_ms
        try:
            self.db.table.update_item(
                Key=self._record_key(user_id, kind, record_id),
                UpdateExpression="SET lease_token = :t, lease_until = :u"
                + (", work_sk = :w" if kind in WORK_KINDS else ""),
                ConditionExpression="attribute_exists(SK) AND "
                "(attribute_not_exists(lease_until) OR lease_until <= :now)",
                ExpressionAttributeValues={
                    ":t": token,
                    ":u": until,
                    ":now": now_ms,
                    **({":w": _work_sk(until)} if kind in WORK_KINDS else {}),
                },
            )
        except ClientError as exc:
            if is_conditional_failure(exc):
                return False
            raise
        return True

    def save_leased(self, user_id: str, write: LeasedWrite) -> None:
        """Write a leased record's data (renewing or releasing the lease) iff ``write.token`` still holds it."""
        try:
            self.db.transact([self._leased_update(user_id, write)])
        except TransactionCancelled:
            raise LeaseLost(write.record_id) from None

    def retire_owner_leased(
        self, user_id: str, ref: str, owner_type: str, owner_id: str, *, expected: int, now_ms: int, write: LeasedWrite
    ) -> int:
        """Retire an owner (generation ``expected`` + 1) and record it in the leased operation, atomically: a
        retirement is never committed without the operation knowing it. OwnerChanged / LeaseLost otherwise."""
        condition = "attribute_not_exists(PK)" if expected == 0 else "generation = :exp"
        values: dict[str, Any] = {":a": False, ":now": now_ms, ":t": owner_type, ":i": owner_id, ":one": 1}
        if expected:
            values[":exp"] = expected
        fence = {
            "Update": {
                "Key": owner_key(self.space, user_id, ref),
                "UpdateExpression": "SET active = :a, updated_at = :now, owner_type = if_not_exists(owner_type, :t), "
                "owner_id = if_not_exists(owner_id, :i) ADD generation :one",
                "ConditionExpression": condition,
                "ExpressionAttributeValues": values,
            }
        }
        try:
            self.db.transact([fence, self._leased_update(user_id, write)])
        except TransactionCancelled as cancelled:
            if cancelled.failed(1):
                raise LeaseLost(write.record_id) from None
            raise OwnerChanged(ref) from None
        return expected + 1

    def due_records(self, kind: str, now_ms: int, limit: int) -> list[tuple[str, str]]:
        """``(user_id, record_id)`` of records due for work (next attempt reached, lease free or expired)."""
        response = self.db.table.query(
            IndexName="work",
            KeyConditionExpression="work_pk = :wpk AND work_sk <= :due",
            ExpressionAttributeValues={":wpk": self.space.work_pk(kind), ":due": _work_sk(now_ms)},
            Limit=limit,
        )
        prefix = f"{RECORD_PREFIX}{kind}#"
        return [
            (self.space.user_of(str(item["PK"])), str(item["SK"])[len(prefix) :]) for item in response.get("Items", [])
        ]

    def _leased_update(self, user_id: str, write: LeasedWrite) -> dict[str, Any]:
        # operation records stay small (counts and, for a purge, at most MAX_PURGE_RESOURCES entries)
        if len(write.data) > INLINE_CHARS:
            raise ValueError("a leased record must fit in one item")
        sets = ["#data = :d", "updated_at = :now"]
        removes: list[str] = []
        values: dict[str, Any] = {":d": write.data, ":now": write.now_ms, ":tok": write.token}
        if write.release:
            removes += ["lease_token", "lease_until"]
            eligible = write.work_at
        else:
            sets.append("lease_until = :u")
            values[":u"] = write.now_ms + write.lease_ms
            eligible = write.now_ms + write.lease_ms
        if write.kind in WORK_KINDS:
            if eligible is None:
                removes += ["work_pk", "work_sk"]
            else:
                sets += ["work_pk = :wp", "work_sk = :ws"]
                values[":wp"] = self.space.work_pk(write.kind)
                values[":ws"] = _work_sk(eligible)
        if write.ttl_s is None:
            removes.append("#ttl")
        else:
            sets.append("#ttl = :ttl")
            values[":ttl"] = write.now_ms // 1000 + write.ttl_s
        expression = "SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else "")
        return {
            "Update": {
                "Key": self._record_key(user_id, write.kind, write.record_id),
                "UpdateExpression": expression,
                "ConditionExpression": "lease_token = :tok AND lease_until > :now",
                "ExpressionAttributeNames": {"#data": "data", "#ttl": "ttl"},
                "ExpressionAttributeValues": values,
            }
        }


WORK_KINDS = frozenset({"operation"})


def _part_prefix(record_sk: str) -> str:
    """``R#<kind>#<id>`` → ``RP#<kind>#<id>#``: where that record's part items live."""
    return f"{RECORD_PART_PREFIX}{record_sk[len(RECORD_PREFIX) :]}#"


def _work_sk(at_ms: int) -> str:
    return f"{max(0, at_ms):015d}"


def _work_keys(space: keys.KeySpace, kind: str, at_ms: int) -> dict[str, str]:
    return {"work_pk": space.work_pk(kind), "work_sk": _work_sk(at_ms)} if kind in WORK_KINDS else {}


def _live(item: dict[str, Any], now_ms: int | None) -> bool:
    ttl = item.get("ttl")
    return now_ms is None or ttl is None or int(ttl) > now_ms // 1000


def _rev_condition(rev: int | None) -> tuple[str, dict[str, Any]]:
    if rev is None:
        return "attribute_exists(SK) AND attribute_not_exists(rev)", {}
    return "attribute_exists(SK) AND rev = :rev", {":rev": rev}


def _task_delete(
    space: keys.KeySpace, key: dict[str, str], resource: StoredResource, condition: str, values: dict[str, Any]
) -> list[dict[str, Any]]:
    """A listed task's delete; in a tenant's space only in the status it was listed in, and a pending one leaves
    the tenant's pending count in the same transaction (docs/tenancy.md, limits)."""
    action = _delete(key, condition, values)
    if not pending.counted(space):
        return [action]
    status = resource.status or "pending"
    ending = [pending.decrement(space)] if status == "pending" else []
    return [{"Delete": pending.with_status(action["Delete"], status)}, *ending]


def _delete(key: dict[str, str], condition: str, values: dict[str, Any]) -> dict[str, Any]:
    action: dict[str, Any] = {"Key": key, "ConditionExpression": condition}
    if values:
        action["ExpressionAttributeValues"] = values
    return {"Delete": action}
