"""Cloud-data cleanup operations as resumable background work (see docs/data-model.md and docs/decisions.md).

An operation advances in steps of at most :data:`STEP` resources. A worker (the request that starts it, or the
tick) first takes the operation's lease (:data:`LEASE_MS`, a random token); every progress write afterwards is
conditioned on that token and renews the lease, and each resource delete is the *same* transaction as the
progress write that counts it. So two workers never both advance one operation, a worker that lost its lease
(it paused past the lease and another took over) writes nothing more, and every resource is deleted and counted
exactly once, whoever finishes the operation.

``retire-owner``: the first step retires the owner (inactive, generation + 1, only if still at the previewed
generation) in one transaction with the operation record; each step then deletes up to 25 resources the owner
owns *now* (tasks last, so an outbox row whose only owner clue is its task is deleted first). ``purge``: walks the
previewed list (a cursor), deleting each resource only while it is still the previewed version.

A failed step counts an attempt and backs off ``min(1 h, 30 s × 2^attempts)``; after 8 attempts, or at once on
``CLOUD_PLAN_CHANGED`` / ``CLOUD_OWNER_CHANGED``, the operation is ``failed`` and ``counts[].failed`` holds what was
left. The tick resumes due operations (the ``work`` index: next attempt reached, or lease expired).
"""

from __future__ import annotations

import copy
import uuid as uuid_lib
from collections.abc import Callable, Mapping
from typing import Any, TypedDict

from amsg import jsonio
from amsg.context import AppContext
from amsg.crypto import UserCodec, compact_json
from amsg.domain.inventory import Entry, OwnerResolver, build_inventory, resource_id
from amsg.domain.ownership import owner_ref
from amsg.errors import LeaseLost, OwnerChanged
from amsg.hooks import call_hook, load_hooks
from amsg.jsonio import JsonObject
from amsg.observability import logger
from amsg.ports import LeasedWrite, StoredResource

KIND = "operation"
LEASE_MS = 120_000
STEP = 25
MAX_ATTEMPTS = 8
BACKOFF_BASE_MS = 30_000
BACKOFF_CAP_MS = 3_600_000
RETENTION_S = 30 * 86_400  # finished operations are kept 30 days (table TTL; readers ignore expired ones)
TICK_LIMIT = 25  # operations advanced per tick (one step each)
TICK_MARGIN_MS = 15_000  # stop starting steps while this much invocation time is left
TERMINAL_CODES = frozenset({"CLOUD_PLAN_CHANGED", "CLOUD_OWNER_CHANGED"})
RETRY_MESSAGE = "云端清理尚未完成；服务器会根据记录继续重试。"
CHANGED_MESSAGE = "预览后资源已被修改"
RECREATED_MESSAGE = "已清理的资源被重新创建"
OWNER_CHANGED_MESSAGE = "归属者在预览后已变化"


class OperationCount(TypedDict):
    type: str  # a resource type
    deleted: int
    remaining: int
    failed: int


class OperationError(TypedDict):
    code: str
    message: str


class CleanupOperation(TypedDict):
    """An operation's record, stored encrypted and advanced under its lease; the first twelve keys are what the
    API shows of it."""

    id: str
    planId: str
    idempotencyKey: str
    mode: str  # purge | retire-owner
    owner: JsonObject | None  # the owner as the client named it ({type, id, label?})
    ownerGeneration: int | None  # retire-owner: the generation the plan previewed
    fencedGeneration: int | None  # retire-owner: the generation the retirement wrote
    status: str  # pending | running | completed | failed
    counts: list[OperationCount]
    errors: list[OperationError]
    createdAt: int
    updatedAt: int
    entries: list[list[str]]  # purge: [id, type, version] per resource, in deletion order
    cursor: int
    attempts: int
    nextAttemptAt: int


class CleanupStepError(Exception):
    """A step failed with a code; terminal codes fail the operation at once, others are retried later."""

    def __init__(self, code: str, message: str = RETRY_MESSAGE) -> None:
        super().__init__(code)
        self.code = code
        self.message = message


def backoff_ms(attempts: int) -> int:
    return int(min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2**attempts))


def inventory(ctx: AppContext, user_id: str, codec: UserCodec) -> tuple[list[Entry], dict[str, StoredResource], bool]:
    assert ctx.cloud_data is not None
    listing = ctx.cloud_data.list_resources(user_id)
    entries = build_inventory(user_id, codec, listing.resources, resolve_owner=owner_resolver(ctx), gaps=listing.gaps)
    stored = {resource_id(user_id, r.type, r.identity): r for r in listing.resources}
    return entries, stored, not listing.gaps


def owner_resolver(ctx: AppContext) -> OwnerResolver | None:
    """The host's ``resolve_owner`` hook, if the hooks module exports one (``async`` hooks run to completion)."""
    hook = load_hooks(ctx.settings.hooks_module).resolve_owner
    if hook is None:
        return None
    return lambda info: call_hook(hook, info)


def owned_by(entry: Entry, owner: Mapping[str, Any]) -> bool:
    found = entry.resource["owner"]
    if found is not None and (found["type"], found["id"]) == (owner["type"], owner["id"]):
        return True
    return entry.owner_ref == owner_ref(owner["type"], owner["id"])


def deletion_order(entry_type: str, rid: str) -> tuple[bool, str]:
    """Tasks last: outbox rows may know their owner only through their task."""
    return entry_type == "task", rid


def load(ctx: AppContext, user_id: str, codec: UserCodec, operation_id: str) -> CleanupOperation | None:
    assert ctx.cloud_data is not None
    stored = ctx.cloud_data.get_record(user_id, KIND, operation_id, now_ms=ctx.now_ms())
    if stored is None:
        return None
    operation: CleanupOperation = jsonio.loads(codec.decrypt(stored))
    return operation


def create(ctx: AppContext, user_id: str, codec: UserCodec, operation: CleanupOperation) -> None:
    """Store a new operation, due at once (so the tick finishes it even if its request dies)."""
    assert ctx.cloud_data is not None
    now = ctx.now_ms()
    data = codec.encrypt(compact_json(operation))
    ctx.cloud_data.put_record(user_id, KIND, operation["id"], data, now_ms=now, ttl_s=None, work_at=now)


def advance(ctx: AppContext, user_id: str, codec: UserCodec, operation_id: str) -> CleanupOperation | None:
    """One step of the operation under its lease; returns the operation as it then stands (the stored copy,
    unchanged, when it is finished, backing off, or leased by another worker). Raises LeaseLost when the lease
    was lost mid-step (nothing more was written)."""
    assert ctx.cloud_data is not None
    store = ctx.cloud_data
    now = ctx.now_ms()
    operation = load(ctx, user_id, codec, operation_id)
    if operation is None or operation["status"] in ("completed", "failed") or operation["nextAttemptAt"] > now:
        return operation
    token = str(uuid_lib.uuid4())
    if not store.claim_record(user_id, KIND, operation_id, token, now_ms=now, lease_ms=LEASE_MS):
        return operation
    operation = load(ctx, user_id, codec, operation_id)  # authoritative, read under the lease
    if operation is None:
        return None
    step = _Step(ctx, user_id, codec, operation, token)
    try:
        if operation["status"] not in ("completed", "failed"):
            operation["status"] = "running"
            step.run()
            operation = step.op
            operation["errors"] = []
            operation["attempts"] = 0
    except LeaseLost:
        raise
    except Exception as exc:
        operation = step.op
        code = exc.code if isinstance(exc, CleanupStepError) else "CLOUD_CLEANUP_FAILED"
        if not isinstance(exc, CleanupStepError):
            logger.warning("cloud cleanup step failed", extra={"error": type(exc).__name__})
        operation["attempts"] = operation.get("attempts", 0) + 1
        terminal = code in TERMINAL_CODES or operation["attempts"] >= MAX_ATTEMPTS
        message = exc.message if isinstance(exc, CleanupStepError) and code in TERMINAL_CODES else RETRY_MESSAGE
        operation["errors"] = [{"code": code, "message": message}]
        operation["nextAttemptAt"] = ctx.now_ms() + backoff_ms(operation["attempts"])
        operation["status"] = "failed" if terminal else "pending"
        if terminal:
            for count in operation["counts"]:
                count["failed"] = count["remaining"]
    finished = operation["status"] in ("completed", "failed")
    if finished:
        operation["entries"] = []
    operation["updatedAt"] = ctx.now_ms()
    step.op = operation
    store.save_leased(
        user_id,
        step.write(release=True, work_at=None if finished else max(operation["nextAttemptAt"], 0)),
    )
    if finished:  # the idempotency key expires with the operation
        key_id = resource_id(user_id, "idempotency", [operation["idempotencyKey"]])
        store.set_record_ttl(user_id, "opkey", key_id, now_ms=ctx.now_ms(), ttl_s=RETENTION_S)
    return operation


class _Step:
    """One bounded step of one operation, every write fenced by the lease token."""

    def __init__(self, ctx: AppContext, user_id: str, codec: UserCodec, op: CleanupOperation, token: str) -> None:
        assert ctx.cloud_data is not None and ctx.owners is not None
        self.ctx, self.user_id, self.codec, self.op, self.token = ctx, user_id, codec, op, token
        self.store = ctx.cloud_data
        self.owners = ctx.owners

    def write(
        self, op: CleanupOperation | None = None, *, release: bool = False, work_at: int | None = None
    ) -> LeasedWrite:
        record = op if op is not None else self.op
        finished = record["status"] in ("completed", "failed")
        return LeasedWrite(
            kind=KIND,
            record_id=record["id"],
            data=self.codec.encrypt(compact_json(record)),
            token=self.token,
            now_ms=self.ctx.now_ms(),
            lease_ms=LEASE_MS,
            release=release,
            work_at=work_at,
            ttl_s=RETENTION_S if finished and release else None,
        )

    def run(self) -> None:
        if self.op["mode"] == "retire-owner":
            self._retire()
        else:
            self._purge()

    def _inventory(self) -> tuple[list[Entry], dict[str, StoredResource]]:
        entries, stored, complete = inventory(self.ctx, self.user_id, self.codec)
        if not complete:
            raise CleanupStepError("CLOUD_INVENTORY_INCOMPLETE")
        return entries, stored

    def _counted(self, entry_type: str) -> CleanupOperation:
        """A copy of the operation with one more resource of ``entry_type`` deleted."""
        trial = copy.deepcopy(self.op)
        count = next(c for c in trial["counts"] if c["type"] == entry_type)
        count["deleted"] += 1
        count["remaining"] = max(0, count["remaining"] - 1)
        trial["updatedAt"] = self.ctx.now_ms()
        return trial

    # ---- retire-owner -------------------------------------------------------------------------------------

    def _retire(self) -> None:
        owner, generation = self.op["owner"], self.op["ownerGeneration"]
        assert owner is not None and generation is not None  # a retire-owner plan names both
        ref = owner_ref(owner["type"], owner["id"])
        if self.op["fencedGeneration"] is None:
            trial = copy.deepcopy(self.op)
            trial["fencedGeneration"] = generation + 1
            trial["updatedAt"] = self.ctx.now_ms()
            try:
                self.store.retire_owner_leased(
                    self.user_id, ref, owner["type"], owner["id"], expected=generation,
                    now_ms=self.ctx.now_ms(), write=self.write(trial),
                )  # fmt: skip
            except OwnerChanged:
                raise CleanupStepError("CLOUD_OWNER_CHANGED", OWNER_CHANGED_MESSAGE) from None
            self.op = trial
        else:
            state = self.owners.get(self.user_id, ref)
            if state is None or state.active or state.generation != self.op["fencedGeneration"]:
                raise CleanupStepError("CLOUD_OWNER_CHANGED", OWNER_CHANGED_MESSAGE)
        entries, stored = self._inventory()
        targets = sorted(
            (e for e in entries if owned_by(e, owner)),
            key=lambda e: deletion_order(e.resource["type"], e.resource["id"]),
        )
        for count in self.op["counts"]:
            count["remaining"] = sum(1 for e in targets if e.resource["type"] == count["type"])
        deleted = changed = 0
        for entry in targets[:STEP]:
            trial = self._counted(entry.resource["type"])
            if self.store.delete_resource(self.user_id, stored[entry.resource["id"]], self.write(trial)):
                self.op = trial
                deleted += 1
            else:
                changed += 1  # written to since listed (e.g. acked): listed again by the next step
        if changed and not deleted:
            raise CleanupStepError("CLOUD_CLEANUP_FAILED")
        left = len(targets) - deleted
        if left == 0:
            entries, _ = self._inventory()
            left = sum(1 for e in entries if owned_by(e, owner))
        self.op["status"] = "completed" if left == 0 else "pending"

    # ---- purge ------------------------------------------------------------------------------------------

    def _purge(self) -> None:
        planned: list[list[str]] = self.op["entries"]  # [id, type, version], in deletion order
        entries, stored = self._inventory()
        current = {e.resource["id"]: e for e in entries}
        processed = {rid for rid, _, _ in planned[: self.op["cursor"]]}
        if any(rid in current for rid in processed):
            raise CleanupStepError("CLOUD_PLAN_CHANGED", RECREATED_MESSAGE)
        for rid, entry_type, version in planned[self.op["cursor"] : self.op["cursor"] + STEP]:
            found = current.get(rid)
            if found is not None and found.version != version:
                raise CleanupStepError("CLOUD_PLAN_CHANGED", CHANGED_MESSAGE)
            trial = self._counted(entry_type)
            trial["cursor"] += 1
            if found is None:  # already gone (deleted by the user meanwhile): counts as removed
                self.store.save_leased(self.user_id, self.write(trial))
            elif not self.store.delete_resource(self.user_id, stored[rid], self.write(trial)):
                raise CleanupStepError("CLOUD_PLAN_CHANGED", CHANGED_MESSAGE)
            self.op = trial
        if self.op["cursor"] < len(planned):
            self.op["status"] = "pending"
            return
        entries, _ = self._inventory()
        present = {e.resource["id"] for e in entries}
        if any(rid in present for rid, _, _ in planned):
            raise CleanupStepError("CLOUD_PLAN_CHANGED", RECREATED_MESSAGE)
        self.op["status"] = "completed"


def resume_due(ctx: AppContext, remaining_ms: Callable[[], int]) -> dict[str, int]:
    """The tick's share: advance up to :data:`TICK_LIMIT` due operations by one step each, each isolated (a
    broken record never stops the others), while the invocation has time left."""
    if not ctx.settings.cloud_data_management or ctx.cloud_data is None or ctx.owners is None:
        return {}
    advanced = failed = 0
    for user_id, operation_id in ctx.cloud_data.due_records(KIND, ctx.now_ms(), TICK_LIMIT):
        if remaining_ms() < TICK_MARGIN_MS:
            break
        try:
            advance(ctx, user_id, ctx.codec(user_id), operation_id)
            advanced += 1
        except Exception as exc:  # logged without content; the record stays due and is retried
            failed += 1
            logger.warning("cloud cleanup resumption failed", extra={"error": type(exc).__name__})
    return {"cleanupOperationsAdvanced": advanced, "cleanupOperationsFailed": failed}
