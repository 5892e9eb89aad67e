"""client_state in DynamoDB: the per-user cloud mirror of client state (see docs/data-model.md).

Items (all in the user's partition ``U#<uid>``):

* root: ``S#<ns>\\x1f<keyPart>`` with ``ns``, ``key``, ``value`` (inline ciphertext) or ``blob_token`` +
  ``blob_parts``, ``updated_at`` (the LWW guard, ms), ``rev``, ``ref_rows``/``ref_bytes`` (reference-equivalent
  accounting), ``ret_pk = STNS#<ns>`` + ``ret_sk`` = zero-padded ``updated_at`` (GSI ``retention``, TTL sweeps);
* value part: ``SC#<ns>\\x1f<keyPart>\\x1f<token>#<index:05d>`` with ``v``, a slice of the ciphertext text.

``keyPart`` is the raw key while the UTF-8 bytes of namespace + key fit 900, else ``\\x1e`` + sha256(key): user
namespaces and keys never contain U+0000–U+001F, so neither separator can occur in them.

A value is one storage ciphertext (hex ``iv:tag:ct``, the reference's at-rest format). Up to ``INLINE_CHARS`` it
sits in the root; larger ones are cut by character offset into parts written *before* the root that references them
under a fresh per-write token, so a reader never pairs a root with another write's parts; parts that are missing
make the key read as absent. ``ref_rows``/``ref_bytes`` record what the reference would have stored, which is what
``deleted`` and the namespace ``byteSize`` report.

Writes are read → decide → compare-and-set: consistent BatchGetItem of the touched roots, the reference's
last-write-wins rule in memory, then one TransactWriteItems whose root Puts/Deletes are conditioned on the root as
read (``rev`` + ``updated_at`` + blob token). A failed condition means a concurrent write landed in between: the
part is re-read and re-decided, so a newer concurrent value is never overwritten by an older one. A request is cut
into transactions of at most 100 actions and ~3.5 MB, by logical key; if a later one fails,
:class:`~amsg.errors.PartialWriteError` names the entries already committed.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from amsg.adapters.dynamo import keys
from amsg.adapters.dynamo.owners import GuardSet, effective_owner, owner_sets, raise_if_guard_failed
from amsg.adapters.dynamo.table import (
    INLINE_CHARS,
    BlobRef,
    DynamoTable,
    TransactionCancelled,
    backoff,
    is_conditional_failure,
    item_int,
)
from amsg.domain.client_state import DAY_MS, reference_footprint
from amsg.errors import ClaimLost, CloudGuardError, PartialWriteError, StoreUnavailable
from amsg.ports import NamespaceListing, NamespaceStats, OwnerClaim, StateRow, StateWrite, StateWriteResult

SEP = "\x1f"
HASHED_KEY_MARK = "\x1e"
RAW_KEY_BUDGET_BYTES = 900
ROOT_PREFIX = "S#"
PART_PREFIX = "SC#"
RETENTION_INDEX = "retention"
TX_MAX_ACTIONS = 100
TX_MAX_BYTES = 3_500_000  # DynamoDB allows 4 MB per transaction; keep a margin for names and overhead
ITEM_OVERHEAD_BYTES = 1_024
WRITE_ATTEMPTS = 8
BATCH_GET_MAX_KEYS = 100
MAX_NAMESPACE_BYTES = 4 * 128  # a valid namespace (128 UTF-16 units) never exceeds this many UTF-8 bytes


def key_part(namespace: str, key: str) -> str:
    if len(namespace.encode("utf-8")) + len(key.encode("utf-8")) <= RAW_KEY_BUDGET_BYTES:
        return key
    return HASHED_KEY_MARK + hashlib.sha256(key.encode("utf-8")).hexdigest()


def root_prefix(namespace: str) -> str:
    return f"{ROOT_PREFIX}{namespace}{SEP}"


def root_sk(namespace: str, key: str) -> str:
    return root_prefix(namespace) + key_part(namespace, key)


def namespace_parts_prefix(namespace: str) -> str:
    return f"{PART_PREFIX}{namespace}{SEP}"


def value_parts_prefix(namespace: str, key: str) -> str:
    return namespace_parts_prefix(namespace) + key_part(namespace, key) + SEP


def pad_ms(ms: int) -> str:
    return f"{max(0, ms):016d}"


def _addressable(namespace: str) -> bool:
    """A namespace longer than any valid one cannot have rows (and would overflow the 1 KB sort key)."""
    return len(namespace.encode("utf-8")) <= MAX_NAMESPACE_BYTES


class _TooManyActions(Exception):
    """A part's actions plus its owner checks exceed one transaction: split it (nothing was written)."""


@dataclass
class _Group:
    """All entries of one request that address the same (namespace, key), in request order."""

    namespace: str
    key: str
    sk: str
    indexes: list[int] = field(default_factory=list)


@dataclass
class _Attempt:
    """One read-decide-write round of a part: its actions, and what it supersedes if it commits."""

    guards: GuardSet
    actions: list[dict[str, Any]] = field(default_factory=list)
    replaced: list[tuple[_Group, str]] = field(default_factory=list)  # (key, blob token) of superseded values
    used: set[str] = field(default_factory=set)  # blob tokens the actions reference
    decided: dict[int, bool] = field(default_factory=dict)  # write index -> won


def _decide_group(
    group: _Group,
    current: dict[str, Any] | None,
    stored_ref: str | None,
    writes: list[StateWrite],
    now_ms: int,
    plan: _Attempt,
) -> int | None:
    """Last-writer-wins over the key's entries in order, against the stored root; the index of the entry that
    ends up written, or None when every entry lost."""
    state: int | None = item_int(current.get("updated_at")) if current else None
    final: int | None = None
    for index in group.indexes:
        write = writes[index]
        wins = state is None or state <= write.guard or state > now_ms
        plan.decided[index] = wins
        if wins:
            owner = effective_owner(write.owner, write.generation, stored_ref)
            if owner is not None:
                plan.guards.add(owner.ref, owner.generation)
            final = index
            state = write.guard if write.value is not None else None
    return final


class DynamoClientStateStore:
    def __init__(self, table: DynamoTable, *, space: keys.KeySpace = keys.SINGLE) -> None:
        self.db = table
        self.space = space

    # ---- write --------------------------------------------------------------------------------------------

    def upsert(
        self,
        user_id: str,
        writes: list[StateWrite],
        *,
        now_ms: int,
        fence: tuple[str, int] | None = None,
        inherit: OwnerClaim | None = None,
    ) -> StateWriteResult:
        """Last-write-wins batch: a write or delete applies iff its guard ≥ the stored one, or the
        stored one is "from the future" (> now). Entries addressing the same key apply in request order.

        Owned keys: each applied entry commits only while its owner (named, or recorded on the key) holds, in
        the same transaction; ``inherit`` is the owner of the task whose fire writes (every write is gated on it,
        and naming another owner is ``CLOUD_CROSS_OWNER_WRITE``)."""
        pk = self.space.user_pk(user_id)
        groups: dict[str, _Group] = {}
        for index, write in enumerate(writes):
            sk = root_sk(write.namespace, write.key)
            groups.setdefault(sk, _Group(write.namespace, write.key, sk)).indexes.append(index)
        outcomes: list[bool] = [False] * len(writes)
        committed: list[int] = []
        check = _fence_check(pk, fence) if fence is not None else None
        named = {w.owner.ref for w in writes if w.owner is not None}
        if inherit is not None and any(ref != inherit.ref for ref in named):
            raise CloudGuardError("CLOUD_CROSS_OWNER_WRITE", "任务只能写入自己归属者的状态")
        # owner checks share the 100-action transaction: room is kept for the named ones and the inherited one;
        # a part that also meets owners recorded on its keys and overflows is split before anything is written
        reserved = (1 if check else 0) + len(named) + (1 if inherit else 0)
        parts = self._plan_parts(list(groups.values()), writes, reserved=reserved)
        while parts:
            part = parts.pop(0)
            try:
                self._write_part(pk, part, writes, now_ms, outcomes, check, inherit)
            except _TooManyActions:
                half = len(part) // 2
                parts[:0] = [part[:half], part[half:]]
                continue
            except Exception as exc:
                if committed:
                    raise PartialWriteError(sorted(committed), exc) from exc
                raise
            committed.extend(i for group in part for i in group.indexes)
        result = StateWriteResult(outcomes=outcomes)
        for write, applied in zip(writes, outcomes, strict=True):
            if not applied:
                result.skipped += 1
                result.skipped_entries.append({"namespace": write.namespace, "key": write.key})
            elif write.value is None:
                result.deleted += 1
            else:
                result.upserted += 1
        return result

    def _plan_parts(self, groups: list[_Group], writes: list[StateWrite], reserved: int = 0) -> list[list[_Group]]:
        """Transactions of ≤ 100 actions (one per key) and ≤ ~3.5 MB, never splitting a key's entries."""
        parts: list[list[_Group]] = []
        current: list[_Group] = []
        size = 0
        for group in groups:
            inline = [len(writes[i].value or "") for i in group.indexes if len(writes[i].value or "") <= INLINE_CHARS]
            estimate = ITEM_OVERHEAD_BYTES + 3 * len(group.sk.encode("utf-8")) + max(inline, default=0)
            if current and (len(current) >= TX_MAX_ACTIONS - reserved or size + estimate > TX_MAX_BYTES):
                parts.append(current)
                current, size = [], 0
            current.append(group)
            size += estimate
        if current:
            parts.append(current)
        return parts

    def _write_part(
        self,
        pk: str,
        part: list[_Group],
        writes: list[StateWrite],
        now_ms: int,
        outcomes: list[bool],
        check: dict[str, Any] | None = None,
        inherit: OwnerClaim | None = None,
    ) -> None:
        new_blobs: dict[int, BlobRef] = {}  # write index -> parts written for it (reused across attempts)
        kept: set[str] = set()
        try:
            for attempt in range(WRITE_ATTEMPTS):
                plan = self._plan_attempt(pk, part, writes, now_ms, inherit, new_blobs)
                if plan.actions and not self._commit(pk, part, plan, check, attempt):
                    continue  # a concurrent write changed a root since the read: decide again
                kept = plan.used
                for index, wins in plan.decided.items():
                    outcomes[index] = wins
                for group, token in plan.replaced:
                    self._delete_parts(pk, group.namespace, group.key, token)
                return
        finally:
            for index, blob in new_blobs.items():
                if blob.token not in kept:
                    write = writes[index]
                    self._delete_parts(pk, write.namespace, write.key, blob.token)

    def _plan_attempt(
        self,
        pk: str,
        part: list[_Group],
        writes: list[StateWrite],
        now_ms: int,
        inherit: OwnerClaim | None,
        new_blobs: dict[int, BlobRef],
    ) -> _Attempt:
        """Read the part's roots (consistently: the linearization point) and decide every entry against them."""
        stored = self._read_roots(pk, [group.sk for group in part])
        plan = _Attempt(GuardSet(self.space))
        if inherit is not None:
            plan.guards.add(inherit.ref, inherit.generation)
        for group in part:
            current = stored.get(group.sk)
            stored_ref = str(current["owner_ref"]) if current and current.get("owner_ref") else None
            final = _decide_group(group, current, stored_ref, writes, now_ms, plan)
            if final is None:
                continue  # every entry lost
            action = self._root_action(pk, group, final, writes[final], current, stored_ref, new_blobs, plan)
            if action is not None:
                plan.actions.append(action)
            if current is not None and current.get("blob_token"):
                plan.replaced.append((group, str(current["blob_token"])))
        return plan

    def _root_action(
        self,
        pk: str,
        group: _Group,
        index: int,
        write: StateWrite,
        current: dict[str, Any] | None,
        stored_ref: str | None,
        new_blobs: dict[int, BlobRef],
        plan: _Attempt,
    ) -> dict[str, Any] | None:
        """The key's transaction action for its winning entry; None when deleting an absent key (a no-op that
        still counts as deleted)."""
        if write.value is None:
            if current is None:
                return None
            return {"Delete": {"Key": {"PK": pk, "SK": group.sk}, **_cas(current)}}
        blob = self._blob_for(pk, group, index, write, new_blobs)
        if blob is not None:
            plan.used.add(blob.token)
        item = self._root_item(pk, group, write, current, blob)
        owner = effective_owner(write.owner, write.generation, stored_ref)
        item.update(owner_sets(owner))
        if owner is not None and owner.meta is None and current and current.get("cloud_meta"):
            item["cloud_meta"] = current["cloud_meta"]  # inherited: the record stays as it was
        return {"Put": {"Item": item, **_cas(current)}}

    def _commit(self, pk: str, part: list[_Group], plan: _Attempt, check: dict[str, Any] | None, attempt: int) -> bool:
        """Send the attempt's transaction (with its owner guards and the fencing check); False: decide again."""
        data_actions = len(plan.actions)
        actions = plan.actions + plan.guards.actions(self.space.user_of(pk))
        if check is not None:
            actions.append(check)
        if len(actions) > TX_MAX_ACTIONS and len(part) > 1:
            raise _TooManyActions
        try:
            self.db.transact(actions)
        except TransactionCancelled as exc:
            if check is not None and exc.failed(len(actions) - 1):
                raise ClaimLost("the task claim fencing this write is gone") from exc
            raise_if_guard_failed(exc, data_actions, len(plan.guards))
            if "ConditionalCheckFailed" not in exc.reasons:
                raise
            if attempt >= WRITE_ATTEMPTS - 1:
                raise StoreUnavailable("client state write kept conflicting") from exc
            backoff(attempt + 1, base_s=0.01, cap_s=0.2)
            return False
        return True

    def _blob_for(
        self, pk: str, group: _Group, index: int, write: StateWrite, new_blobs: dict[int, BlobRef]
    ) -> BlobRef | None:
        assert write.value is not None
        if len(write.value) <= INLINE_CHARS:
            return None
        if index not in new_blobs:
            new_blobs[index] = self.db.write_blob(pk, value_parts_prefix(group.namespace, group.key), write.value)
        return new_blobs[index]

    def _root_item(
        self, pk: str, group: _Group, write: StateWrite, current: dict[str, Any] | None, blob: BlobRef | None
    ) -> dict[str, Any]:
        rows, size = reference_footprint(write.plain_bytes)
        item: dict[str, Any] = {
            "PK": pk,
            "SK": group.sk,
            "ns": group.namespace,
            "key": group.key,
            "updated_at": write.guard,
            "rev": item_int(current.get("rev")) + 1 if current else 1,
            "ref_rows": rows,
            "ref_bytes": size,
            "ret_pk": self.space.state_retention_pk(group.namespace),
            "ret_sk": pad_ms(write.guard),
        }
        if blob is None:
            item["value"] = write.value
        else:
            item["blob_token"] = blob.token
            item["blob_parts"] = blob.parts
        return item

    def _read_roots(self, pk: str, sks: list[str]) -> dict[str, dict[str, Any]]:
        """Consistent BatchGetItem of the roots (≤ 100 keys per request, unprocessed keys retried)."""
        found: dict[str, dict[str, Any]] = {}
        for start in range(0, len(sks), BATCH_GET_MAX_KEYS):
            request: dict[str, Any] = {
                self.db.name: {
                    "Keys": [{"PK": pk, "SK": sk} for sk in sks[start : start + BATCH_GET_MAX_KEYS]],
                    "ConsistentRead": True,
                    "ProjectionExpression": "#sk, #ua, #rev, #bt, owner_ref, cloud_meta",
                    "ExpressionAttributeNames": {"#sk": "SK", "#ua": "updated_at", "#rev": "rev", "#bt": "blob_token"},
                }
            }
            for attempt in range(20):
                response = self.db.resource.batch_get_item(RequestItems=request)
                for item in response.get("Responses", {}).get(self.db.name, []):
                    found[item["SK"]] = item
                request = response.get("UnprocessedKeys") or {}
                if not request:
                    break
                backoff(attempt, base_s=0.02, cap_s=0.5)
            else:
                raise StoreUnavailable("client state read throttled")
        return found

    # ---- read ---------------------------------------------------------------------------------------------

    def get_namespace(self, user_id: str, namespace: str) -> list[StateRow]:
        if not _addressable(namespace):
            return []
        pk = self.space.user_pk(user_id)
        rows: list[StateRow] = []
        for item in self.db.query_prefix(pk, root_prefix(namespace)):
            value = self._value_of(pk, item)
            if value is None:
                latest = self.db.get({"PK": pk, "SK": item["SK"]})  # replaced while we read it? one re-read
                value = self._value_of(pk, latest) if latest else None
                item = latest or item
            if value is not None:
                rows.append(StateRow(namespace, item["key"], value, item_int(item.get("updated_at"))))
        rows.sort(key=lambda row: row.key)  # code point order == UTF-8 byte order (the reference's BINARY collation)
        return rows

    def _value_of(self, pk: str, item: dict[str, Any]) -> str | None:
        inline = item.get("value")
        if isinstance(inline, str):
            return inline
        token = item.get("blob_token")
        if not token:
            return None
        ref = BlobRef(str(token), item_int(item.get("blob_parts")))
        return self.db.read_blob(pk, value_parts_prefix(item["ns"], item["key"]), ref)

    def list_namespaces(self, user_id: str, limit: int) -> NamespaceListing:
        """Per namespace: entries (roots), reference-equivalent stored bytes, newest ``updated_at``; sorted by
        namespace, then cut to ``limit`` (``truncated`` when more exist)."""
        stats: dict[str, list[int]] = {}
        for item in self.db.query_prefix(
            self.space.user_pk(user_id),
            ROOT_PREFIX,
            ProjectionExpression="#ns, #ua, #rr, #rb",
            ExpressionAttributeNames={"#ns": "ns", "#ua": "updated_at", "#rr": "ref_rows", "#rb": "ref_bytes"},
        ):
            entry = stats.setdefault(str(item["ns"]), [0, 0, 0])
            entry[0] += 1
            entry[1] += item_int(item.get("ref_bytes"))
            entry[2] = max(entry[2], item_int(item.get("updated_at")))
        ordered = sorted(stats)
        return NamespaceListing(
            namespaces=[NamespaceStats(ns, *stats[ns]) for ns in ordered[:limit]],
            truncated=len(ordered) > limit,
        )

    # ---- delete -------------------------------------------------------------------------------------------

    def delete_all(self, user_id: str) -> int:
        """Every root and part of the user (BatchWriteItem: not atomic, idempotent)."""
        pk = self.space.user_pk(user_id)
        doomed: list[dict[str, str]] = []
        count = 0
        for item in self.db.query_prefix(pk, ROOT_PREFIX, **_KEYS_AND_ROWS):
            doomed.append({"PK": item["PK"], "SK": item["SK"]})
            count += item_int(item.get("ref_rows"), 1)
        for item in self.db.query_prefix(pk, PART_PREFIX, ProjectionExpression="PK, SK"):
            doomed.append({"PK": item["PK"], "SK": item["SK"]})
        if doomed:
            self.db.batch_delete(doomed)
        return count

    def delete_namespace(self, user_id: str, namespace: str) -> int:
        """One namespace with its parts: roots first, then parts, in transactions of ≤ 100 deletes. Atomic up to
        100 items; beyond that each transaction is atomic on its own (the reference's single transaction cannot
        be had — documented in docs/compatibility.md)."""
        if not _addressable(namespace):
            return 0
        pk = self.space.user_pk(user_id)
        doomed: list[dict[str, str]] = []
        count = 0
        for item in self.db.query_prefix(pk, root_prefix(namespace), **_KEYS_AND_ROWS):
            doomed.append({"PK": item["PK"], "SK": item["SK"]})
            count += item_int(item.get("ref_rows"), 1)
        for item in self.db.query_prefix(pk, namespace_parts_prefix(namespace), ProjectionExpression="PK, SK"):
            doomed.append({"PK": item["PK"], "SK": item["SK"]})
        for start in range(0, len(doomed), TX_MAX_ACTIONS):
            self.db.transact([{"Delete": {"Key": key}} for key in doomed[start : start + TX_MAX_ACTIONS]])
        return count

    def cleanup_expired(self, ttl_days: Mapping[str, float], now_ms: int, *, limit: int = 100) -> int:
        """TTL housekeeping: delete entries of the configured namespaces
        (all users) whose stored ``updatedAt`` is older than ``now − days``; at most ``limit`` keys per call."""
        deleted = 0
        budget = limit
        for namespace, days in ttl_days.items():
            if budget <= 0:
                break
            if isinstance(days, bool) or not isinstance(days, int | float) or not math.isfinite(days) or days <= 0:
                continue
            before = math.ceil(now_ms - days * DAY_MS)  # updated_at < now - days·86 400 000
            if before <= 0 or not _addressable(namespace):
                continue
            page = self.db.table.query(
                IndexName=RETENTION_INDEX,
                KeyConditionExpression="ret_pk = :rpk AND ret_sk < :before",
                ExpressionAttributeValues={":rpk": self.space.state_retention_pk(namespace), ":before": pad_ms(before)},
                Limit=budget,
            )
            for hit in page.get("Items", []):
                budget -= 1
                deleted += self._expire_root(hit["PK"], hit["SK"], before)
        return deleted

    def _expire_root(self, pk: str, sk: str, before: int) -> int:
        try:
            response = self.db.table.delete_item(
                Key={"PK": pk, "SK": sk},
                ConditionExpression="#ua < :before",
                ExpressionAttributeNames={"#ua": "updated_at"},
                ExpressionAttributeValues={":before": before},
                ReturnValues="ALL_OLD",
            )
        except ClientError as exc:
            if is_conditional_failure(exc):
                return 0  # rewritten since the index was read
            raise
        old = response.get("Attributes") or {}
        if old.get("blob_token"):
            self._delete_parts(pk, str(old["ns"]), str(old["key"]), str(old["blob_token"]))
        return item_int(old.get("ref_rows"), 1)

    def _delete_parts(self, pk: str, namespace: str, key: str, token: str) -> None:
        """Best effort: leftover parts are unreferenced (never read) and go with the next namespace delete."""
        try:
            self.db.delete_blob(pk, value_parts_prefix(namespace, key), token)
        except Exception:  # garbage collection must not fail a committed write
            from amsg.observability import logger

            logger.warning("client state parts cleanup failed", extra={"parts": "left unreferenced"})


_KEYS_AND_ROWS: dict[str, Any] = {
    "ProjectionExpression": "PK, SK, #rr",
    "ExpressionAttributeNames": {"#rr": "ref_rows"},
}


def _cas(current: dict[str, Any] | None) -> dict[str, Any]:
    """The root must still be exactly as read: absent, or same ``rev``, ``updated_at`` and blob token (a root
    deleted and re-created in between restarts ``rev``; the other two make that ABA case visible too)."""
    if current is None:
        return {"ConditionExpression": "attribute_not_exists(SK)"}
    names = {"#rev": "rev", "#ua": "updated_at", "#bt": "blob_token"}
    values: dict[str, Any] = {":rev": item_int(current.get("rev")), ":ua": item_int(current.get("updated_at"))}
    condition = "#rev = :rev AND #ua = :ua AND "
    if current.get("blob_token"):
        condition += "#bt = :bt"
        values[":bt"] = current["blob_token"]
    else:
        condition += "attribute_not_exists(#bt)"
    return {"ConditionExpression": condition, "ExpressionAttributeNames": names, "ExpressionAttributeValues": values}


def _fence_check(pk: str, fence: tuple[str, int]) -> dict[str, Any]:
    """The claim check a hook's state write commits with: the firing task is still pending under our claim."""
    task_uuid, claim_version = fence
    return {
        "ConditionCheck": {
            "Key": {"PK": pk, "SK": keys.task_sk(task_uuid)},
            "ConditionExpression": "claim_version = :cv AND #st = :pending",
            "ExpressionAttributeNames": {"#st": "status"},
            "ExpressionAttributeValues": {":cv": claim_version, ":pending": "pending"},
        }
    }
