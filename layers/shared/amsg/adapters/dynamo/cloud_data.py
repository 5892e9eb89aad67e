"""Cloud-data management in DynamoDB: everything one user stores, read as logical resources, and the
management records (paging snapshots) kept for the ``/cloud-data`` routes (see docs/data-model.md).

Resources are read straight from the user's partition with strongly consistent queries (tasks ``T#``, client
state roots ``S#``, credentials ``C#``, outbox rows ``O#``) and one read of the push subscription; a source that
cannot be read contributes nothing and a ``READ_FAILED`` gap. Value parts (``TP#``, ``SC#``, ``OP#``) belong to
the resource whose item references them and are never resources of their own.

Records: ``R#<kind>#<id>`` with ``data`` (the encrypted JSON), ``updated_at`` (ms) and a ``ttl``.
"""

from __future__ import annotations

import hashlib
from decimal import Decimal
from typing import Any

from botocore.exceptions import ClientError

from amsg import jsonio
from amsg.adapters.dynamo import keys
from amsg.adapters.dynamo.client_state import root_sk, value_parts_prefix
from amsg.adapters.dynamo.table import BlobRef, DynamoTable, is_conditional_failure
from amsg.adapters.dynamo.tasks import delete_with_registry
from amsg.observability import logger
from amsg.ports import ResourceListing, StoredResource
from amsg.timeutil import parse_iso_ms

RECORD_PREFIX = "R#"
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
    def __init__(self, table: DynamoTable) -> None:
        self.t = table

    # ---- inventory source -------------------------------------------------------------------------------

    def list_resources(self, user_id: str) -> ResourceListing:
        pk = keys.user_pk(user_id)
        listing = ResourceListing()
        readers = (
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
        for item in self.t.query_prefix(pk, keys.TASK_PREFIX):
            payload = item.get("payload")
            if payload is None and item.get("payload_token"):
                payload = self.t.read_blob(
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
        for item in self.t.query_prefix(pk, "S#"):
            value = item.get("value")
            size = _int(item.get("ref_bytes"))
            out.append(
                StoredResource(
                    type="state",
                    identity=[item.get("ns"), item.get("key")],
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
            for item in self.t.query_prefix(pk, keys.CREDENTIAL_PREFIX)
        ]

    def _outbox(self, pk: str) -> list[StoredResource]:
        out = []
        for item in self.t.query_prefix(pk, keys.OUTBOX_PREFIX):
            payload = item.get("payload")
            if payload is None and item.get("payload_token"):
                payload = self.t.read_blob(
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
        item = self.t.get(keys.push_key(user_id))
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

    def delete_resource(self, user_id: str, resource: StoredResource) -> bool:
        """Delete one logical resource with every item it owns (parts, the task's uuid registry entry), only
        while it is still the version that was listed; False when it changed (or is already gone)."""
        pk = keys.user_pk(user_id)
        if resource.type == "task":
            uuid = str(resource.identity[0])
            return delete_with_registry(self.t, user_id, uuid, "rev = :rev", {":rev": resource.rev})
        if resource.type == "state":
            namespace, key = str(resource.identity[0]), str(resource.identity[1])
            old = self._delete_if_rev({"PK": pk, "SK": root_sk(namespace, key)}, resource.rev)
            if old is not None and old.get("blob_token"):
                self.t.delete_blob(pk, value_parts_prefix(namespace, key), str(old["blob_token"]))
            return old is not None
        if resource.type == "credential":
            return (
                self._delete_if_rev(keys.credential_key(user_id, str(resource.identity[0])), resource.rev) is not None
            )
        if resource.type == "outbox":
            message_id = str(resource.identity[0])
            old = self._delete_if_rev(keys.outbox_key(user_id, message_id), resource.rev)
            if old is not None and old.get("payload_token"):
                self.t.delete_blob(pk, keys.outbox_part_prefix(message_id), str(old["payload_token"]))
            return old is not None
        return self._delete_if_rev(keys.push_key(user_id), resource.rev) is not None

    def _delete_if_rev(self, key: dict[str, str], rev: int | None) -> dict[str, Any] | None:
        condition = "attribute_exists(SK) AND " + ("rev = :rev" if rev is not None else "attribute_not_exists(rev)")
        kwargs: dict[str, Any] = {"Key": key, "ConditionExpression": condition, "ReturnValues": "ALL_OLD"}
        if rev is not None:
            kwargs["ExpressionAttributeValues"] = {":rev": rev}
        try:
            return self.t.table.delete_item(**kwargs).get("Attributes") or {}
        except ClientError as exc:
            if is_conditional_failure(exc):
                return None
            raise

    # ---- management records -----------------------------------------------------------------------------

    def put_record(
        self, user_id: str, kind: str, record_id: str, data: str, *, now_ms: int, ttl_s: int, create_only: bool = False
    ) -> bool:
        item = {
            "PK": keys.user_pk(user_id),
            "SK": f"{RECORD_PREFIX}{kind}#{record_id}",
            "data": data,
            "updated_at": now_ms,
            "ttl": now_ms // 1000 + ttl_s,
        }
        if not create_only:
            self.t.table.put_item(Item=item)
            return True
        try:
            self.t.table.put_item(Item=item, ConditionExpression="attribute_not_exists(SK)")
        except ClientError as exc:
            if is_conditional_failure(exc):
                return False
            raise
        return True

    def delete_record(self, user_id: str, kind: str, record_id: str) -> None:
        self.t.table.delete_item(Key={"PK": keys.user_pk(user_id), "SK": f"{RECORD_PREFIX}{kind}#{record_id}"})

    def get_record(self, user_id: str, kind: str, record_id: str) -> str | None:
        item = self.t.get({"PK": keys.user_pk(user_id), "SK": f"{RECORD_PREFIX}{kind}#{record_id}"})
        return item.get("data") if item else None

    def list_records(self, user_id: str, kind: str) -> list[str]:
        prefix = f"{RECORD_PREFIX}{kind}#"
        return [str(item["data"]) for item in self.t.query_prefix(keys.user_pk(user_id), prefix) if item.get("data")]
