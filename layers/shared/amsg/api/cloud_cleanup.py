"""``POST /cloud-data/cleanup-plans`` and ``/cleanup-operations`` (create, list, get).

A plan previews what a cleanup would delete (``retire-owner``: everything of one owner; ``purge``: the selected
resources) and is kept for 15 minutes. Starting an operation from a plan consumes the plan (idempotency key: the
same key for the same plan returns the same operation, for another plan ``IDEMPOTENCY_CONFLICT``), stores the
operation as ``pending`` and runs its first step within the request: ``retire-owner`` retires the owner first
(inactive, generation + 1, only if its generation is still the previewed one), so no write or push of it commits
afterwards; each step deletes at most 25 resources. The answer is the operation as it then stands (``pending``
with ``counts[].remaining`` while more is left, ``completed`` when done); the tick finishes it in the background
(:mod:`amsg.engine.cleanup`).
"""

from __future__ import annotations

import uuid as uuid_lib
from collections.abc import Mapping
from typing import Any, TypedDict

from amsg import jsonio
from amsg.context import AppContext
from amsg.crypto import UserCodec, compact_json
from amsg.domain.inventory import RESOURCE_TYPES, resource_id
from amsg.domain.limits import can_be_record_id
from amsg.domain.ownership import owner_ref, valid_cloud_owner
from amsg.engine import cleanup
from amsg.engine.cleanup import CleanupOperation, deletion_order, inventory, owned_by
from amsg.errors import LeaseLost, api_error
from amsg.jsonio import JsonObject

PLAN_TTL_MS = 15 * 60_000
PLAN_RECORD_TTL_S = 3600
# A purge operation carries its previewed list ([id, type, version] per resource) in its one leased record, so
# one purge covers at most this many resources (a retire-owner has no such limit: it deletes what the owner owns).
MAX_PURGE_RESOURCES = 1000
IMPACTS = {
    "retire-owner": [
        "停用此归属者，并清理它的全部云端数据，包括操作进行期间新增的数据。",
        "已经交给推送服务的通知无法撤回。",
    ],
    "purge": ["只清理预览中的资源；之后的正常写入可以重新创建它们。"],
}


class PlanCount(TypedDict):
    type: str
    count: int


class CleanupPlan(TypedDict):
    """A plan as the API answers it."""

    id: str
    mode: str  # purge | retire-owner
    ownerGeneration: int | None
    owner: JsonObject | None
    resources: list[JsonObject]  # the inventory's public resources
    count: int
    counts: list[PlanCount]
    expiresAt: int
    impacts: list[str]
    complete: bool
    gaps: list[JsonObject]


class StoredPlan(CleanupPlan):
    """A plan as stored until an operation starts from it: with each resource's previewed version."""

    versions: dict[str, str]


PUBLIC_OPERATION_FIELDS = (
    "id", "planId", "idempotencyKey", "mode", "owner", "ownerGeneration", "fencedGeneration", "status", "counts",
    "errors", "createdAt", "updatedAt",
)  # fmt: skip


def _save(ctx: AppContext, user_id: str, codec: UserCodec, kind: str, record: StoredPlan, ttl_s: int) -> None:
    assert ctx.cloud_data is not None
    data = codec.encrypt(compact_json(record))
    ctx.cloud_data.put_record(user_id, kind, record["id"], data, now_ms=ctx.now_ms(), ttl_s=ttl_s)


def _load(ctx: AppContext, user_id: str, codec: UserCodec, kind: str, record_id: str) -> Any:
    """The stored record (a :class:`StoredPlan` or a :class:`CleanupOperation`, as ``kind`` says)."""
    assert ctx.cloud_data is not None
    if not can_be_record_id(record_id):  # over a sort key's size: names nothing, and DynamoDB would refuse it
        raise api_error("CLOUD_RECORD_NOT_FOUND")
    stored = ctx.cloud_data.get_record(user_id, kind, record_id, now_ms=ctx.now_ms())
    if stored is None:
        raise api_error("CLOUD_RECORD_NOT_FOUND")
    return jsonio.loads(codec.decrypt(stored))


# ---- plans ----------------------------------------------------------------------------------------------


def create_plan(ctx: AppContext, user_id: str, codec: UserCodec, body: JsonObject) -> CleanupPlan:
    mode = body.get("mode")
    if mode not in ("purge", "retire-owner"):
        raise api_error("INVALID_CLEANUP_MODE")
    owner = body.get("owner")
    if ("owner" in body and not valid_cloud_owner(owner)) or (mode == "retire-owner" and owner is None):
        raise api_error("INVALID_CLOUD_OWNER", "owner 无效", status=400)
    ids, types = body.get("resourceIds"), body.get("types")
    if ids is not None and (not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids)):
        raise api_error("INVALID_CLEANUP_SELECTION")
    if types is not None and (not isinstance(types, list) or not types or any(t not in RESOURCE_TYPES for t in types)):
        raise api_error("INVALID_CLEANUP_SELECTION")
    if mode == "purge" and owner is None and not ids:
        raise api_error("INVALID_CLEANUP_SELECTION")
    if mode == "retire-owner" and ("resourceIds" in body or "types" in body):
        raise api_error("INVALID_CLEANUP_SELECTION")

    generation = None
    if mode == "retire-owner":
        assert ctx.owners is not None
        assert owner is not None  # checked above: retire-owner needs an owner
        state = ctx.owners.get(user_id, owner_ref(owner["type"], owner["id"]))
        generation = state.generation if state else 0
    entries, _, complete = inventory(ctx, user_id, codec)
    if not complete:
        raise api_error("CLOUD_INVENTORY_INCOMPLETE")
    selected = [
        e
        for e in entries
        if (owner is None or owned_by(e, owner))
        and (ids is None or e.resource["id"] in ids)
        and (types is None or e.resource["type"] in types)
    ]
    if ids is not None and len(set(ids)) != len(selected):
        raise api_error("CLOUD_RESOURCE_NOT_FOUND")
    if mode == "purge" and len(selected) > MAX_PURGE_RESOURCES:
        raise api_error("INVALID_CLEANUP_SELECTION", details={"selected": len(selected), "max": MAX_PURGE_RESOURCES})
    now = ctx.now_ms()
    plan: CleanupPlan = {
        "id": str(uuid_lib.uuid4()),
        "mode": mode,
        "ownerGeneration": generation,
        "owner": owner,
        "resources": [e.resource for e in selected],
        "count": len(selected),
        "counts": [{"type": t, "count": sum(1 for e in selected if e.resource["type"] == t)} for t in RESOURCE_TYPES],
        "expiresAt": now + PLAN_TTL_MS,
        "impacts": IMPACTS[mode],
        "complete": True,
        "gaps": [],
    }
    _save(ctx, user_id, codec, "plan", {**plan, "versions": {e.resource["id"]: e.version for e in selected}},
          PLAN_RECORD_TTL_S)  # fmt: skip
    return plan


# ---- operations -----------------------------------------------------------------------------------------


def _public(operation: CleanupOperation) -> JsonObject:
    record: Mapping[str, Any] = operation
    return {name: record[name] for name in PUBLIC_OPERATION_FIELDS}


def operations_of(ctx: AppContext, user_id: str, codec: UserCodec) -> list[CleanupOperation]:
    assert ctx.cloud_data is not None
    records = ctx.cloud_data.list_records(user_id, "operation", now_ms=ctx.now_ms())
    return [jsonio.loads(codec.decrypt(d)) for d in records]


def list_operations(ctx: AppContext, user_id: str, codec: UserCodec) -> JsonObject:
    assert ctx.cloud_data is not None
    operations: list[CleanupOperation] = []
    gaps: list[JsonObject] = []
    for data in ctx.cloud_data.list_records(user_id, "operation", now_ms=ctx.now_ms()):
        try:
            operations.append(jsonio.loads(codec.decrypt(data)))
        except Exception:
            gaps.append({"source": "operation", "code": "UNREADABLE_OPERATION", "message": "无法读取清理操作记录"})
    operations.sort(key=lambda op: op["createdAt"], reverse=True)
    return {"operations": [_public(op) for op in operations], "complete": not gaps, "gaps": gaps}


def get_operation(ctx: AppContext, user_id: str, codec: UserCodec, operation_id: str) -> JsonObject:
    if not operation_id:
        raise api_error("CLOUD_RECORD_NOT_FOUND")
    return _public(_load(ctx, user_id, codec, "operation", operation_id))


def start_operation(ctx: AppContext, user_id: str, codec: UserCodec, body: JsonObject) -> JsonObject:
    plan_id, key = body.get("planId"), body.get("idempotencyKey")
    if not isinstance(plan_id, str) or not isinstance(key, str) or not key.strip() or len(key) > 200:
        raise api_error("INVALID_CLEANUP_OPERATION")
    key_id = resource_id(user_id, "idempotency", [key])
    assert ctx.cloud_data is not None
    existing_id = ctx.cloud_data.get_record(user_id, "opkey", key_id, now_ms=ctx.now_ms())
    if existing_id is not None:
        earlier: CleanupOperation = _load(ctx, user_id, codec, "operation", codec.decrypt(existing_id))
        if earlier["planId"] != plan_id:
            raise api_error("IDEMPOTENCY_CONFLICT")
        return _advance_once(ctx, user_id, codec, earlier)

    plan: StoredPlan = _load(ctx, user_id, codec, "plan", plan_id)
    now = ctx.now_ms()
    if plan["expiresAt"] < now:
        raise api_error("CLOUD_PLAN_EXPIRED")
    owner = plan["owner"]
    if plan["mode"] == "retire-owner":
        assert ctx.owners is not None
        assert owner is not None  # checked above: retire-owner needs an owner
        state = ctx.owners.get(user_id, owner_ref(owner["type"], owner["id"]))
        if (state.generation if state else 0) != plan["ownerGeneration"]:
            raise api_error("CLOUD_PLAN_CHANGED")
    else:
        entries, _, complete = inventory(ctx, user_id, codec)
        if not complete:
            raise api_error("CLOUD_INVENTORY_INCOMPLETE")
        current = {e.resource["id"]: e.version for e in entries}
        if any(current.get(rid) != version for rid, version in plan["versions"].items()):
            raise api_error("CLOUD_PLAN_CHANGED")
    planned = sorted(
        ([r["id"], r["type"], plan["versions"][r["id"]]] for r in plan["resources"]),
        key=lambda e: deletion_order(e[1], e[0]),
    )
    operation: CleanupOperation = {
        "id": str(uuid_lib.uuid4()),
        "planId": plan_id,
        "idempotencyKey": key,
        "mode": plan["mode"],
        "owner": owner,
        "ownerGeneration": plan["ownerGeneration"],
        "fencedGeneration": None,
        "status": "pending",
        "counts": [{"type": c["type"], "deleted": 0, "remaining": c["count"], "failed": 0} for c in plan["counts"]],
        "errors": [],
        "createdAt": now,
        "updatedAt": now,
        "entries": planned if plan["mode"] == "purge" else [],
        "cursor": 0,
        "attempts": 0,
        "nextAttemptAt": 0,
    }
    cleanup.create(ctx, user_id, codec, operation)
    claimed = ctx.cloud_data.put_record(
        user_id, "opkey", key_id, codec.encrypt(operation["id"]), now_ms=now, ttl_s=None,
        create_only=True,
    )  # fmt: skip
    if not claimed:  # a concurrent start with the same key won: continue its operation, drop ours
        ctx.cloud_data.delete_record(user_id, "operation", operation["id"])
        winner = ctx.cloud_data.get_record(user_id, "opkey", key_id) or ""
        operation = _load(ctx, user_id, codec, "operation", codec.decrypt(winner))
        if operation["planId"] != plan_id:
            raise api_error("IDEMPOTENCY_CONFLICT")
    else:
        ctx.cloud_data.delete_record(user_id, "plan", plan_id)  # a plan starts one operation
    return _advance_once(ctx, user_id, codec, operation)


def _advance_once(ctx: AppContext, user_id: str, codec: UserCodec, operation: CleanupOperation) -> JsonObject:
    """The request's own step (at most 25 resources); the tick does the rest. A retirement whose owner is not
    retired yet after it (lease held elsewhere, back-off, storage error) answers 503: the client must keep the
    owner's local data and look again."""
    try:
        advanced = cleanup.advance(ctx, user_id, codec, operation["id"])
    except LeaseLost:
        raise api_error("CLOUD_LEASE_LOST") from None
    operation = advanced or operation
    if operation["mode"] == "retire-owner" and operation["fencedGeneration"] is None:
        raise api_error("CLOUD_RETIREMENT_NOT_CONFIRMED")
    return _public(operation)
