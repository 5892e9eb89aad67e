"""Tasks in DynamoDB, the delivery side: the due index, claims fenced by ``claim_version``, leases and their
heartbeat. Settlements and housekeeping of settled tasks are :mod:`.settlements`; the API side
(create/read/update/delete) is :mod:`.tasks`; all share its item mapping.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from amsg.adapters.dynamo import claim_batches, keys, pending
from amsg.adapters.dynamo.compact import pack_names
from amsg.adapters.dynamo.counters import cas_attempts, read_counter, set_counter
from amsg.adapters.dynamo.delivery_policy import policy_row
from amsg.adapters.dynamo.outbox import fits_one_transaction, new_row_put
from amsg.adapters.dynamo.owners import guard_check
from amsg.adapters.dynamo.settlements import DynamoSettlements
from amsg.adapters.dynamo.subscriptions import subscription_row
from amsg.adapters.dynamo.table import DynamoTable, TransactionCancelled, item_int
from amsg.adapters.dynamo.tasks import stored_ms
from amsg.adapters.dynamo.tenants import active_fence, tenant_key, tenant_record
from amsg.failures import ClaimTaken
from amsg.ports import (
    APPEND_FALLBACK,
    AppendFallback,
    ClaimAlone,
    ClaimStore,
    ClaimWanted,
    DueCandidate,
    DuePageToken,
    OutboxAppend,
    RunSnapshot,
    TaskRow,
    names_on_task,
)
from amsg.ports.tenants import TenantInactive
from amsg.timeutil import iso_from_ms

APPEND_ATTEMPTS = 40
# A claim is adopted by one run: the first, or a later one once the adopter's lease has expired (it died). Two
# deliveries of one SQS message running at once thus never both work the claim (see docs/delivery.md).
ADOPTABLE = "(attribute_not_exists(adopted_cv) OR adopted_cv <> :cv OR lease_until < :now)"
ADOPTING = f"attribute_exists(lease_until) AND {ADOPTABLE}"
CLAIM_BATCH = 25
"""Most claims per batch: DynamoDB's limit of statements per ``BatchExecuteStatement`` (a transaction may hold 100;
a smaller one loses less to a conflict, and the claimer keeps every claim worker busy)."""


class DynamoClaimStore(DynamoSettlements):
    """Due index, claims fenced by ``claim_version``, adoption, the run's read, the batch append, leases.

    ``single_claims``: a batch of claims is written as single conditional writes, one ``BatchExecuteStatement``
    (3 write units a claim) instead of one ``TransactWriteItems`` (6); either is read back with one
    ``BatchGetItem`` (claim_batches.py; docs/decisions.md, 38 and 41b)."""

    def __init__(
        self,
        table: DynamoTable,
        *,
        due_shards: int = 1,
        space: keys.KeySpace = keys.SINGLE,
        single_claims: bool = False,
    ) -> None:
        super().__init__(table, due_shards=due_shards, space=space)
        self.single_claims = single_claims

    claim_batch = CLAIM_BATCH

    def due_candidates(
        self, shard: int, now_ms: int, limit: int, start: DuePageToken | None = None
    ) -> tuple[list[DueCandidate], DuePageToken | None]:
        """The token is the query's ``LastEvaluatedKey`` (the index and table keys of the page's last item: texts)."""
        kwargs: dict[str, Any] = {
            "IndexName": "due",
            "KeyConditionExpression": "due_pk = :shard AND due_sk <= :end",
            "ExpressionAttributeValues": {
                ":shard": self.space.due_shard_pk(shard),
                ":end": keys.due_window_end(iso_from_ms(now_ms)),
            },
            "Limit": limit,
        }
        if start is not None and start.wire:  # an empty token (as a claim job may carry) is the start
            kwargs["ExclusiveStartKey"] = _start_key(start)
        response = self.db.table.query(**kwargs)
        candidates = [
            DueCandidate(
                user_id=item["user_id"],
                uuid=item["uuid"],
                next_send_at_ms=stored_ms(item["next_send_at"]) or 0,
                retry_count=item_int(item.get("retry_count")),
                retry_after_ms=stored_ms(item.get("retry_after")),
                due_key=item.get("due_sk", ""),
            )
            for item in response.get("Items", [])
        ]
        last = response.get("LastEvaluatedKey")
        return candidates, (DuePageToken(last) if last else None)

    def claim(
        self,
        user_id: str,
        uuid: str,
        *,
        expected_next_send_at_ms: int,
        now_ms: int,
        lease_until_ms: int,
        owner: str,
        group: str | None = None,
    ) -> TaskRow | None:
        expected_next_send_at = iso_from_ms(expected_next_send_at_ms)
        now_iso, lease_until = iso_from_ms(now_ms), iso_from_ms(lease_until_ms)
        if group is not None:
            return self._claim_grouped(user_id, uuid, expected_next_send_at, now_iso, lease_until, owner, group)
        attributes = self._update_if(
            **self._claim_update(user_id, uuid, expected_next_send_at, now_iso, lease_until, owner),
            ReturnValues="ALL_NEW",
        )
        return None if attributes is None else self._row(attributes)

    def claim_many(
        self, wanted: Sequence[ClaimWanted], *, now_ms: int, lease_until_ms: int, owner: str
    ) -> list[TaskRow | ClaimAlone | None]:
        """Up to CLAIM_BATCH claims (the same conditions and writes as :meth:`claim`) in one write request, then
        one consistent BatchGetItem of the claimed rows (claim_batches.py): a claimer's claim rate is bound by
        its client CPU (building, signing and parsing requests), and a request per claim costs several times a
        batch's. A task whose condition fails is None; one whose claim could not be written is left to be
        claimed alone (CLAIM_ALONE). If the read fails after the claims were written, the exception
        propagates; those tasks come back when their lease expires (later, never lost or doubled)."""
        return self.claim_many_together([(self, wanted)], now_ms=now_ms, lease_until_ms=lease_until_ms, owner=owner)[0]

    def claim_many_together(
        self,
        parts: Sequence[tuple[ClaimStore, Sequence[ClaimWanted]]],
        *,
        now_ms: int,
        lease_until_ms: int,
        owner: str,
    ) -> list[list[TaskRow | ClaimAlone | None]]:
        """:meth:`claim_many` for the claims of several key spaces (the tenants of one round of the multi-tenant
        tick) in one write request and one read back. Each part's store builds its own keys, so a claim is
        written in its own space only; the stores must share this store's table."""
        flat = [(_same_table(self, store), w) for store, part in parts for w in part]
        if len(flat) > CLAIM_BATCH:
            raise ValueError(f"at most {CLAIM_BATCH} claims per batch")
        now_iso, lease_until = iso_from_ms(now_ms), iso_from_ms(lease_until_ms)
        updates = [
            store._claim_update(w.user_id, w.uuid, iso_from_ms(w.expected_next_send_at_ms), now_iso, lease_until, owner)
            for store, w in flat
        ]
        write = claim_batches.by_statements if self.single_claims else claim_batches.by_transaction
        written, claimed = write(self.db, updates)
        results: list[TaskRow | ClaimAlone | None] = list(written)
        if claimed:
            items = claim_batches.read_back(self.db, {i: updates[i]["Key"] for i in claimed}, owner, lease_until)
            for i, item in items.items():
                results[i] = flat[i][0]._row(item)
        return _split(results, [len(part) for _, part in parts])

    def pending_counts(self, stores: Sequence[ClaimStore]) -> list[int | None]:
        """Each store's count of pending tasks (docs/tenancy.md, limits), in one BatchGetItem per 100 stores: 0 for
        a tenant that never had one, None for a space that keeps no count (the single line)."""
        spaces = [_same_table(self, store).space for store in stores]
        wanted = [space.pending_counter_key() for space in spaces if pending.counted(space)]
        # eventually consistent, like the due index it stands in for: half the read units of a consistent read
        found = self.db.batch_get_now(wanted, consistent=False) if wanted else {}
        counts: list[int | None] = []
        for space in spaces:
            if not pending.counted(space):
                counts.append(None)
                continue
            key = space.pending_counter_key()
            counts.append(item_int(found.get((key["PK"], key["SK"]), {}).get(pending.COUNT)))
        return counts

    def _claim_update(
        self, user_id: str, uuid: str, expected_next_send_at: str, now_iso: str, lease_until: str, owner: str
    ) -> dict[str, Any]:
        """The conditional update of a claim: pending at the occurrence read, lease free, retry due; takes the
        lease, moves the due-index key to the lease expiry, bumps ``claim_version``."""
        return {
            "Key": self._key(user_id, uuid),
            "UpdateExpression": (
                "SET lease_until = :lease, lease_owner = :owner, updated_at = :now, due_sk = :dsk "
                "ADD claim_version :one"
            ),
            "ConditionExpression": self._CLAIM_CONDITION,
            "ExpressionAttributeNames": {"#st": "status"},
            "ExpressionAttributeValues": {
                ":lease": lease_until,
                ":owner": owner,
                ":now": now_iso,
                ":dsk": keys.due_sk(lease_until, uuid),
                ":one": 1,
                ":pending": "pending",
                ":expected": expected_next_send_at,
            },
        }

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
        lock_key = self.space.group_lock_key(user_id, group)
        lock = self.db.get(lock_key)
        holder = lock.get("holder") if lock else None
        if holder and holder != uuid:
            current = self.db.get(self._key(user_id, holder), projection="#st, lease_until", names={"#st": "status"})
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
            self.db.transact(actions)
        except TransactionCancelled:
            return None  # the lock moved, the holder renewed, or the task changed
        item = self.db.get(self._key(user_id, uuid))
        return self._row(item) if item else None

    def adopt_claim(
        self,
        user_id: str,
        uuid: str,
        claim_version: int,
        next_send_at_ms: int,
        lease_until_ms: int,
        owner: str,
        now_ms: int,
    ) -> TaskRow | None:
        """run_task takes over the tick's claim in one write: only if it is still current (same claim version
        and occurrence, still pending and leased) and not adopted by a run that still holds it, switching to
        the run lease; returns the task, None when the claim moved on, ClaimTaken when another run has it."""
        now_iso = iso_from_ms(now_ms)
        attributes = self._move_lease(
            user_id,
            uuid,
            claim_version,
            iso_from_ms(lease_until_ms),
            owner,
            occurrence=iso_from_ms(next_send_at_ms),
            adopt_at=now_iso,
        )
        if attributes is None:
            item = self._refused_adoption(user_id, uuid, claim_version, now_iso, owner)
            return None if item is None else self._row(item)  # adopted by this very run already: idempotent
        return self._row(attributes)

    def _refused_adoption(
        self, user_id: str, uuid: str, claim_version: int, now_iso: str, owner: str
    ) -> dict[str, Any] | None:
        """Why an adoption was refused: ClaimTaken (raised) when the claim is current but another run adopted it
        and still holds its lease (then nothing of this run may touch the task or its outbox rows); the task
        when it is ``owner`` itself that holds it; else None (the claim moved on)."""
        item = self.db.get(self._key(user_id, uuid))
        if (
            item is not None
            and item.get("status", "pending") == "pending"
            and item_int(item.get("claim_version")) == claim_version
            and item_int(item.get("adopted_cv"), None) == claim_version
            and str(item.get("lease_until") or "") >= now_iso
        ):
            if item.get("lease_owner") == owner:
                return item
            raise ClaimTaken(uuid)
        return None

    def open_run(self, user_id: str, uuid: str, claim_version: int, next_send_at_ms: int) -> RunSnapshot | None:
        """One consistent BatchGetItem: the task, the push subscription, the outbox counter and the delivery
        policy (and, in a tenant's space, the tenant's registry record: docs/tenancy-data.md). The claim is
        current when the task is still pending under this claim version and occurrence and still leased."""
        task_key = self._key(user_id, uuid)
        wanted = [
            task_key,
            self.space.push_key(user_id),
            self.space.counter_key(user_id, "outbox"),
            self.space.policy_key(user_id),
        ]
        if self.space.tenant_id is not None:  # its status and key ride along: no registry read of their own
            wanted.append(tenant_key(self.space.tenant_id))
        found = self.db.batch_get(wanted)
        item = found.get((task_key["PK"], task_key["SK"]))
        if (
            item is None
            or item_int(item.get("claim_version")) != claim_version
            or item.get("status", "pending") != "pending"
            or not item.get("lease_until")
        ):
            return None
        row = self._row(item)
        if row.next_send_at_ms != next_send_at_ms:
            return None
        push = found.get((wanted[1]["PK"], wanted[1]["SK"]))
        subscription = subscription_row(push)
        counter = found.get((wanted[2]["PK"], wanted[2]["SK"]))
        policy = policy_row(found.get((wanted[3]["PK"], wanted[3]["SK"])))
        tenant = found.get((wanted[4]["PK"], wanted[4]["SK"])) if len(wanted) > 4 else None
        seq = item_int(counter.get("n")) if counter else 0
        return RunSnapshot(row, subscription, seq, policy, tenant_record(tenant) if tenant else None)

    def append_batch(
        self,
        row: TaskRow,
        rows: Sequence[OutboxAppend],
        *,
        now_ms: int,
        lease_until_ms: int | None,
        owner: str,
        claim_first: str | None = None,
        outbox_seq: int | None = None,
    ) -> list[int] | AppendFallback | None:
        """One transaction: the outbox counter (compare-and-set from the value read with the task), the task
        (claim still ours and leased; records the occurrence, adopts the claim: :meth:`_adoption`), every row
        as new, and an owned task's owner check (rows and the first push claim commit only while it holds)."""
        # a tenant's first push is taken here only while the tenant is active (docs/tenancy-data.md)
        owned = row.owner
        checks = [] if owned is None else [guard_check(self.space, row.user_id, owned.ref, owned.generation)]
        fence = active_fence(self.space) if claim_first is not None else None
        checks += [fence] if fence is not None else []
        if not fits_one_transaction(rows, spare=len(checks)):
            return APPEND_FALLBACK
        counter_key = self.space.counter_key(row.user_id, "outbox")
        now_iso = iso_from_ms(now_ms)
        named = names_on_task(row.outbox_message_ids, rows)  # docs/decisions.md, 45
        task_update, kept_lease_ms = self._adoption(row, now_iso, lease_until_ms, owner, named)
        current = outbox_seq
        for _ in cas_attempts(APPEND_ATTEMPTS):
            if current is None:
                current = read_counter(self.db, counter_key)
            ids = list(range(current + 1, current + 1 + len(rows)))
            puts = [
                {
                    "Put": new_row_put(
                        self.space.outbox_key(row.user_id, item.message_id),
                        item,
                        row_id,
                        sending_at=now_ms if item.message_id == claim_first else None,
                        sending_cv=row.claim_version,
                        by_task_index=named is None or item.message_id not in named,
                    )
                }
                for item, row_id in zip(rows, ids, strict=True)
            ]
            counter_update = set_counter(counter_key, current, ids[-1])
            try:
                self.db.transact([counter_update, task_update, *puts, *checks])
            except TransactionCancelled as cancelled:
                if owned is not None and cancelled.failed(2 + len(puts)):
                    return APPEND_FALLBACK  # the owner moved on: the general append (after adopting) says so
                if fence is not None and cancelled.failed(1 + len(puts) + len(checks)):
                    raise TenantInactive(self.space.tenant_id) from None
                if cancelled.failed(1):
                    if lease_until_ms is not None:
                        self._refused_adoption(row.user_id, row.uuid, row.claim_version, now_iso, owner)
                    return None  # the claim moved on, the task settled or the lease expired
                if any(cancelled.failed(2 + i) for i in range(len(puts))):
                    return APPEND_FALLBACK  # rows of this occurrence exist already
                current = None  # the counter moved: read it again
                continue
            row.outbox_occurrence_ms = row.next_send_at_ms
            row.outbox_message_ids = named if named is not None else row.outbox_message_ids
            if lease_until_ms is not None:
                row.lease_until_ms = kept_lease_ms or lease_until_ms
            return ids
        return APPEND_FALLBACK

    def _adoption(
        self, row: TaskRow, now_iso: str, lease_until_ms: int | None, owner: str, named: Sequence[str] | None = None
    ) -> tuple[dict[str, Any], int | None]:
        """The append's task update, and the lease it keeps (None: it sets ``lease_until_ms``). Adopting (a
        ``lease_until_ms``): nobody claimed since (same claim version and occurrence) and no other run's adoption
        holds. A claim lease that ends no earlier than the run lease asked for is kept as it was read (conditioned
        on it): the adoption then changes nothing the due index holds, so it writes no index entry; otherwise
        the lease and the due-index key move to ``lease_until_ms``. Not adopting: the lease must still be ours
        and unexpired."""
        sets = ["ob_occ = :occ"] + (["ob_mids = :obm"] if named is not None else [])
        values: dict[str, Any] = {
            ":occ": iso_from_ms(row.next_send_at_ms),
            ":cv": row.claim_version,
            ":pending": "pending",
            ":now": now_iso,
        }
        if named is not None:
            values[":obm"] = pack_names(named)
        condition = "claim_version = :cv AND #st = :pending AND next_send_at = :occ AND "
        covers = lease_until_ms is not None and (row.lease_until_ms or 0) >= lease_until_ms
        kept = row.lease_until_ms if covers else None
        if lease_until_ms is None:
            condition += "lease_until > :now"
        elif kept is not None:
            sets += ["lease_owner = :owner", "adopted_cv = :cv"]
            values.update({":owner": owner, ":seen": iso_from_ms(kept)})
            condition += f"lease_until = :seen AND {ADOPTABLE}"
        else:
            lease_until = iso_from_ms(lease_until_ms)
            sets += ["lease_until = :lease", "lease_owner = :owner", "due_sk = :dsk", "adopted_cv = :cv"]
            values.update({":lease": lease_until, ":owner": owner, ":dsk": keys.due_sk(lease_until, row.uuid)})
            condition += ADOPTING
        update = {
            "Key": self._key(row.user_id, row.uuid),
            "UpdateExpression": "SET " + ", ".join(sets),
            "ConditionExpression": condition,
            "ExpressionAttributeNames": {"#st": "status"},
            "ExpressionAttributeValues": values,
        }
        return {"Update": update}, kept

    def renew_lease(self, user_id: str, uuid: str, claim_version: int, lease_until_ms: int, owner: str) -> bool:
        return self._move_lease(user_id, uuid, claim_version, iso_from_ms(lease_until_ms), owner) is not None

    def _move_lease(
        self,
        user_id: str,
        uuid: str,
        claim_version: int,
        lease_until: str,
        owner: str,
        *,
        occurrence: str | None = None,
        adopt_at: str | None = None,
    ) -> dict[str, Any] | None:
        """Set a new lease (and the due-index key that follows it), fenced by the claim version: only while the
        task is pending and leased, and, when ``occurrence`` is given, still at that occurrence. ``adopt_at``
        (now) makes it the claim's adoption: refused while another run's adoption holds, returns the task."""
        condition = "claim_version = :cv AND #st = :pending AND attribute_exists(lease_until)"
        sets = "SET lease_until = :lease, lease_owner = :owner, due_sk = :dsk"
        values: dict[str, Any] = {
            ":lease": lease_until,
            ":owner": owner,
            ":dsk": keys.due_sk(lease_until, uuid),
            ":cv": claim_version,
            ":pending": "pending",
        }
        if occurrence is not None:
            condition += " AND next_send_at = :nsa"
            values[":nsa"] = occurrence
        extra: dict[str, Any] = {}
        if adopt_at is not None:
            condition += f" AND {ADOPTABLE}"
            sets += ", adopted_cv = :cv"
            values[":now"] = adopt_at
            extra["ReturnValues"] = "ALL_NEW"
        return self._update_if(
            Key=self._key(user_id, uuid),
            UpdateExpression=sets,
            ConditionExpression=condition,
            ExpressionAttributeNames={"#st": "status"},
            ExpressionAttributeValues=values,
            **extra,
        )


def _same_table(this: DynamoClaimStore, store: object) -> DynamoClaimStore:
    if not isinstance(store, DynamoClaimStore) or store.db is not this.db:
        raise ValueError("claims of one transaction must share a table")
    return store


def _split(results: list[TaskRow | ClaimAlone | None], sizes: list[int]) -> list[list[TaskRow | ClaimAlone | None]]:
    out, start = [], 0
    for size in sizes:
        out.append(results[start : start + size])
        start += size
    return out


def _start_key(token: DuePageToken) -> dict[str, str]:
    """The ``ExclusiveStartKey`` a due-index page token of this store encodes."""
    if not isinstance(token.wire, Mapping):
        raise ValueError("not a due-index page token of a DynamoDB store")
    return dict(token.wire)
