"""``POST /cloud-data/cleanup-plans`` and ``/cleanup-operations`` (create, list, get).

A plan previews what a cleanup would delete (``retire-owner``: everything of one owner; ``purge``: the selected
resources) and is kept for 15 minutes. Starting an operation from a plan (idempotency key: the same key for the
same plan returns the same operation, for another plan ``IDEMPOTENCY_CONFLICT``) runs it within the request:
``retire-owner`` first retires the owner (inactive, generation + 1, only if its generation is still the
previewed one), so no write or push of it commits afterwards, then deletes every resource owned at that moment;
``purge`` deletes exactly the previewed resources, each only while unchanged (``CLOUD_PLAN_CHANGED`` otherwise).
An operation interrupted midway stays ``pending``; starting it again with its key resumes it (every delete is
idempotent). Resumption by the tick, the 25-resources-per-step pacing and the lease are not built yet.
"""

from __future__ import annotations

import uuid as uuid_lib
from typing import Any

from amsg import jsonio
from amsg.context import AppContext
from amsg.crypto import compact_json, decrypt_from_storage, encrypt_for_storage
from amsg.domain.inventory import RESOURCE_TYPES, Entry, build_inventory, resource_id
from amsg.domain.ownership import owner_ref, valid_cloud_owner
from amsg.errors import OwnerChanged, api_error
from amsg.ports import StoredResource

PLAN_TTL_MS = 15 * 60_000
PLAN_RECORD_TTL_S = 3600
OPERATION_RECORD_TTL_S = 30 * 86_400
IMPACTS = {
    "retire-owner": [
        "停用此归属者，并清理它的全部云端数据，包括操作进行期间新增的数据。",
        "已经交给推送服务的通知无法撤回。",
    ],
    "purge": ["只清理预览中的资源；之后的正常写入可以重新创建它们。"],
}
PUBLIC_OPERATION_FIELDS = (
    "id", "planId", "idempotencyKey", "mode", "owner", "ownerGeneration", "fencedGeneration", "status", "counts",
    "errors", "createdAt", "updatedAt",
)  # fmt: skip


def _inventory(ctx: AppContext, user_id: str, user_key: str) -> tuple[list[Entry], dict[str, StoredResource], bool]:
    assert ctx.cloud_data is not None
    listing = ctx.cloud_data.list_resources(user_id)
    entries = build_inventory(user_id, user_key, listing.resources)
    stored = {resource_id(user_id, r.type, r.identity): r for r in listing.resources}
    return entries, stored, not listing.gaps


def _owned_by(entry: Entry, owner: dict[str, Any]) -> bool:
    found = entry.resource["owner"]
    if found is not None and (found["type"], found["id"]) == (owner["type"], owner["id"]):
        return True
    return entry.owner_ref == owner_ref(owner["type"], owner["id"])


def _save(ctx: AppContext, user_id: str, user_key: str, kind: str, record: dict[str, Any], ttl_s: int) -> None:
    assert ctx.cloud_data is not None
    data = encrypt_for_storage(compact_json(record), user_key)
    ctx.cloud_data.put_record(user_id, kind, record["id"], data, now_ms=ctx.now_ms(), ttl_s=ttl_s)


def _load(ctx: AppContext, user_id: str, user_key: str, kind: str, record_id: str) -> dict[str, Any]:
    assert ctx.cloud_data is not None
    stored = ctx.cloud_data.get_record(user_id, kind, record_id)
    if stored is None:
        raise api_error("CLOUD_RECORD_NOT_FOUND")
    return jsonio.loads(decrypt_from_storage(stored, user_key))


# ---- plans ----------------------------------------------------------------------------------------------


def create_plan(ctx: AppContext, user_id: str, user_key: str, body: dict[str, Any]) -> dict[str, Any]:
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
        state = ctx.owners.get(user_id, owner_ref(owner["type"], owner["id"]))
        generation = state.generation if state else 0
    entries, _, complete = _inventory(ctx, user_id, user_key)
    if not complete:
        raise api_error("CLOUD_INVENTORY_INCOMPLETE")
    selected = [
        e
        for e in entries
        if (owner is None or _owned_by(e, owner))
        and (ids is None or e.resource["id"] in ids)
        and (types is None or e.resource["type"] in types)
    ]
    if ids is not None and len(set(ids)) != len(selected):
        raise api_error("CLOUD_RESOURCE_NOT_FOUND")
    now = ctx.now_ms()
    plan = {
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
    _save(ctx, user_id, user_key, "plan", {**plan, "versions": {e.resource["id"]: e.version for e in selected}},
          PLAN_RECORD_TTL_S)  # fmt: skip
    return plan


# ---- operations -----------------------------------------------------------------------------------------


def _public(operation: dict[str, Any]) -> dict[str, Any]:
    return {name: operation[name] for name in PUBLIC_OPERATION_FIELDS}


def operations_of(ctx: AppContext, user_id: str, user_key: str) -> list[dict[str, Any]]:
    assert ctx.cloud_data is not None
    return [jsonio.loads(decrypt_from_storage(d, user_key)) for d in ctx.cloud_data.list_records(user_id, "operation")]


def list_operations(ctx: AppContext, user_id: str, user_key: str) -> dict[str, Any]:
    assert ctx.cloud_data is not None
    operations, gaps = [], []
    for data in ctx.cloud_data.list_records(user_id, "operation"):
        try:
            operations.append(jsonio.loads(decrypt_from_storage(data, user_key)))
        except Exception:
            gaps.append({"source": "operation", "code": "UNREADABLE_OPERATION", "message": "无法读取清理操作记录"})
    operations.sort(key=lambda op: op["createdAt"], reverse=True)
    return {"operations": [_public(op) for op in operations], "complete": not gaps, "gaps": gaps}


def get_operation(ctx: AppContext, user_id: str, user_key: str, operation_id: str) -> dict[str, Any]:
    if not operation_id:
        raise api_error("CLOUD_RECORD_NOT_FOUND")
    return _public(_load(ctx, user_id, user_key, "operation", operation_id))


def start_operation(ctx: AppContext, user_id: str, user_key: str, body: dict[str, Any]) -> dict[str, Any]:
    plan_id, key = body.get("planId"), body.get("idempotencyKey")
    if not isinstance(plan_id, str) or not isinstance(key, str) or not key.strip() or len(key) > 200:
        raise api_error("INVALID_CLEANUP_OPERATION")
    key_id = resource_id(user_id, "idempotency", [key])
    assert ctx.cloud_data is not None
    existing_id = ctx.cloud_data.get_record(user_id, "opkey", key_id)
    if existing_id is not None:
        operation = _load(ctx, user_id, user_key, "operation", decrypt_from_storage(existing_id, user_key))
        if operation["planId"] != plan_id:
            raise api_error("IDEMPOTENCY_CONFLICT")
        return _public(_run(ctx, user_id, user_key, operation))

    plan = _load(ctx, user_id, user_key, "plan", plan_id)
    now = ctx.now_ms()
    if plan["expiresAt"] < now:
        raise api_error("CLOUD_PLAN_EXPIRED")
    owner = plan["owner"]
    if plan["mode"] == "retire-owner":
        assert ctx.owners is not None
        state = ctx.owners.get(user_id, owner_ref(owner["type"], owner["id"]))
        if (state.generation if state else 0) != plan["ownerGeneration"]:
            raise api_error("CLOUD_PLAN_CHANGED")
    else:
        entries, _, complete = _inventory(ctx, user_id, user_key)
        if not complete:
            raise api_error("CLOUD_INVENTORY_INCOMPLETE")
        current = {e.resource["id"]: e.version for e in entries}
        if any(current.get(rid) != version for rid, version in plan["versions"].items()):
            raise api_error("CLOUD_PLAN_CHANGED")
    operation = {
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
        "versions": plan["versions"],
    }
    _save(ctx, user_id, user_key, "operation", operation, OPERATION_RECORD_TTL_S)
    claimed = ctx.cloud_data.put_record(
        user_id, "opkey", key_id, encrypt_for_storage(operation["id"], user_key), now_ms=now,
        ttl_s=OPERATION_RECORD_TTL_S, create_only=True,
    )  # fmt: skip
    if not claimed:  # a concurrent start with the same key won: continue its operation, drop ours
        ctx.cloud_data.delete_record(user_id, "operation", operation["id"])
        winner_id = decrypt_from_storage(ctx.cloud_data.get_record(user_id, "opkey", key_id) or "", user_key)
        operation = _load(ctx, user_id, user_key, "operation", winner_id)
        if operation["planId"] != plan_id:
            raise api_error("IDEMPOTENCY_CONFLICT")
    return _public(_run(ctx, user_id, user_key, operation))


def _run(ctx: AppContext, user_id: str, user_key: str, operation: dict[str, Any]) -> dict[str, Any]:
    """Fence (retire-owner), then delete; the record is saved after each stage so a retry resumes."""
    if operation["status"] in ("completed", "failed"):
        return operation
    owner = operation["owner"]
    assert ctx.cloud_data is not None and ctx.owners is not None
    if operation["mode"] == "retire-owner" and operation["fencedGeneration"] is None:
        ref = owner_ref(owner["type"], owner["id"])
        try:
            state = ctx.owners.set_active(
                user_id, ref, owner["type"], owner["id"], active=False, expected=operation["ownerGeneration"],
                now_ms=ctx.now_ms(),
            )  # fmt: skip
        except OwnerChanged:
            return _finish(ctx, user_id, user_key, operation, "CLOUD_PLAN_CHANGED", "归属者在预览后已变化")
        operation["fencedGeneration"] = state.generation
        operation["status"] = "running"
        _save(ctx, user_id, user_key, "operation", operation, OPERATION_RECORD_TTL_S)
    entries, stored, complete = _inventory(ctx, user_id, user_key)
    if not complete:
        raise api_error("CLOUD_INVENTORY_INCOMPLETE", status=503)
    if operation["mode"] == "retire-owner":
        targets = [e for e in entries if _owned_by(e, owner)]
    else:
        targets = [e for e in entries if e.resource["id"] in operation["versions"]]
        if any(e.version != operation["versions"][e.resource["id"]] for e in targets):
            return _finish(ctx, user_id, user_key, operation, "CLOUD_PLAN_CHANGED", "预览后资源已被修改")
    counts = {c["type"]: c for c in operation["counts"]}
    for entry in targets:
        type_ = entry.resource["type"]
        if not ctx.cloud_data.delete_resource(user_id, stored[entry.resource["id"]]):
            if operation["mode"] == "purge":
                return _finish(ctx, user_id, user_key, operation, "CLOUD_PLAN_CHANGED", "预览后资源已被修改")
            raise api_error("CLOUD_DATA_FAILED", status=500)  # a retired owner's resource changed: retry
        counts[type_]["deleted"] += 1
        counts[type_]["remaining"] = max(0, counts[type_]["remaining"] - 1)
    for count in operation["counts"]:
        count["remaining"] = 0
    operation["status"] = "completed"
    operation["versions"] = {}
    operation["updatedAt"] = ctx.now_ms()
    _save(ctx, user_id, user_key, "operation", operation, OPERATION_RECORD_TTL_S)
    return operation


def _finish(
    ctx: AppContext, user_id: str, user_key: str, operation: dict[str, Any], code: str, message: str
) -> dict[str, Any]:
    operation["status"] = "failed"
    operation["errors"] = [{"code": code, "message": message}]
    for count in operation["counts"]:
        count["failed"] = count["remaining"]
    operation["versions"] = {}
    operation["updatedAt"] = ctx.now_ms()
    _save(ctx, user_id, user_key, "operation", operation, OPERATION_RECORD_TTL_S)
    return operation
