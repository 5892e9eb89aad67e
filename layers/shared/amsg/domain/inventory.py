"""The cloud-data inventory: everything a user stores, as public resources ``{id, type, owner, kind, label,
byteSize, updatedAt, status}``. Never a body, a key or an endpoint.

Ids are the reference's: sha256 of the compact JSON ``[userId, "<compact JSON [type, ...identity]>"]``, so they
are stable across requests and bound to the user. Owners are resolved in the reference's order: the encrypted
ownership record on the item → the task's stored guard → ``metadata.cloudOwner`` → ``metadata.owner`` →
``owner`` of the payload → the same on the task an outbox row came from → the host's ``resolve_owner`` hook.
The hook is asked about every resource (as the reference does) with ``{type, namespace, key, credId, value,
payload, task, tasks}`` and may answer ``None`` or ``{"owner": {type, id, label?}, "kind": str}``; it never
gets a credential or state value (``value`` is always None), an API key or a push subscription. A hook that
raises adds an ``OWNER_RESOLUTION_FAILED`` gap (the inventory is then incomplete and cleanups wait).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from amsg import jsonio
from amsg.crypto import DecryptError, UserCodec, compact_json
from amsg.domain.jsvalues import is_plain_object
from amsg.domain.ownership import GUARD_FIELD
from amsg.jsonio import JsonObject
from amsg.ports import StoredResource

RESOURCE_TYPES = ("task", "state", "credential", "outbox", "subscription")
OWNER_RESOLUTION_FAILED = "A resource owner could not be resolved"
HIDDEN_TASK_FIELDS = ("apiKey", "pushSubscription")

OwnerResolver = Callable[[JsonObject], Any]
"""The host's ``resolve_owner`` hook (already wrapped to run ``async`` hooks to completion)."""


@dataclass
class Entry:
    """One inventory entry: the public resource and what stays private (version, ownership reference)."""

    resource: JsonObject
    version: str
    owner_ref: str | None


def resource_id(user_id: str, type_: str, identity: Sequence[Any]) -> str:
    key = compact_json([type_, *identity])
    return hashlib.sha256(compact_json([user_id, key]).encode("utf-8")).hexdigest()


def _safe_owner(value: Any) -> JsonObject | None:
    if not is_plain_object(value):
        return None
    kind, ident = value.get("type"), value.get("id")
    if not (isinstance(kind, str) and kind and isinstance(ident, str) and ident):
        return None
    owner: JsonObject = {"type": kind, "id": ident}
    if isinstance(value.get("label"), str):
        owner["label"] = value["label"]
    return owner


def _payload_owner(payload: Mapping[str, Any] | None) -> JsonObject | None:
    if not payload:
        return None
    guard = payload.get(GUARD_FIELD)
    raw_metadata = payload.get("metadata")
    metadata: JsonObject = raw_metadata if is_plain_object(raw_metadata) else {}
    candidates = [
        guard.get("owner") if is_plain_object(guard) else None,
        metadata.get("cloudOwner"),
        metadata.get("owner"),
        payload.get("owner"),
    ]
    for candidate in candidates:
        owner = _safe_owner(candidate)
        if owner is not None:
            return owner
    return None


def _payload_kind(payload: Mapping[str, Any] | None) -> str | None:
    if not payload:
        return None
    raw_metadata = payload.get("metadata")
    metadata: JsonObject = raw_metadata if is_plain_object(raw_metadata) else {}
    for kind in (metadata.get("kind"), payload.get("kind")):
        if isinstance(kind, str):
            return kind
    return None


def _decrypt_json(text: str | None, codec: UserCodec) -> tuple[Any, bool]:
    """(value, readable): JSON if it parses, else the raw text; unreadable ciphertext is (None, False)."""
    if text is None:
        return None, True
    try:
        plain = codec.decrypt(text)
    except (DecryptError, ValueError):
        return None, False
    try:
        return jsonio.loads(plain), True
    except jsonio.JsonError:
        return plain, True


def _label(stored: StoredResource) -> str:
    if stored.type == "state":
        return f"{stored.identity[0]}/{stored.identity[1]}"
    if stored.type == "subscription":
        return "Web Push subscription"
    return str(stored.identity[0])


def _hook_view(payload: Mapping[str, Any] | None) -> JsonObject | None:
    if payload is None:
        return None
    return {k: v for k, v in payload.items() if k not in HIDDEN_TASK_FIELDS}


def _resolver_input(
    item: StoredResource,
    payload: Mapping[str, Any] | None,
    task: Mapping[str, Any] | None,
    tasks: list[JsonObject],
) -> JsonObject:
    return {
        "type": item.type,
        "namespace": item.identity[0] if item.type == "state" else None,
        "key": item.identity[1] if item.type == "state" else None,
        "credId": item.identity[0] if item.type == "credential" else None,
        "value": None,
        "payload": _hook_view(payload) if item.type in ("task", "outbox") else None,
        "task": _hook_view(task),
        "tasks": tasks,
    }


def build_inventory(
    user_id: str,
    codec: UserCodec,
    stored: Sequence[StoredResource],
    *,
    resolve_owner: OwnerResolver | None = None,
    gaps: list[dict[str, str]] | None = None,
) -> list[Entry]:
    """Public resources sorted by id, with owners resolved and missing owner labels filled in. A failing
    ``resolve_owner`` appends its gap to ``gaps``."""
    task_payloads: dict[str, Mapping[str, Any]] = {}
    decoded: list[tuple[StoredResource, Any, bool]] = []
    for item in stored:
        payload, readable = _decrypt_json(item.payload, codec) if item.type in ("task", "outbox") else (None, True)
        if not is_plain_object(payload):
            payload = None
        decoded.append((item, payload, readable))
        if item.type == "task" and payload is not None:
            task_payloads[str(item.identity[0])] = payload
    hook_tasks = [{**(_hook_view(p) or {}), "uuid": uuid} for uuid, p in task_payloads.items()] if resolve_owner else []
    failed_sources: set[str] = set()

    entries: list[Entry] = []
    for item, payload, readable in decoded:
        meta, meta_readable = _decrypt_json(item.cloud_meta, codec)
        meta = meta if is_plain_object(meta) else {}
        related = task_payloads.get(item.task_uuid or "") if item.type == "outbox" else None
        resolved: JsonObject = {}
        if resolve_owner is not None:
            own_task = payload if item.type == "task" else related
            try:
                answer = resolve_owner(_resolver_input(item, payload, own_task, hook_tasks))
            except Exception:
                failed_sources.add(item.type)
            else:
                resolved = answer if is_plain_object(answer) else {}
        owner = _safe_owner(meta.get("owner")) or _payload_owner(payload)
        if owner is None and related is not None:
            owner = _payload_owner(related)
        if owner is None:
            owner = _safe_owner(resolved.get("owner"))
        kind = meta.get("kind") if isinstance(meta.get("kind"), str) else _payload_kind(payload)
        if kind is None and isinstance(resolved.get("kind"), str):
            kind = resolved["kind"]
        status = item.status if readable and meta_readable else "unreadable"
        entries.append(
            Entry(
                resource={
                    "id": resource_id(user_id, item.type, item.identity),
                    "type": item.type,
                    "owner": owner,
                    "kind": kind,
                    "label": _label(item),
                    "byteSize": item.byte_size,
                    "updatedAt": item.updated_at,
                    "status": status,
                },
                version=item.version,
                owner_ref=item.owner_ref,
            )
        )
    if gaps is not None:
        gaps.extend(
            {"source": source, "code": "OWNER_RESOLUTION_FAILED", "message": OWNER_RESOLUTION_FAILED}
            for source in RESOURCE_TYPES
            if source in failed_sources
        )
    _backfill_owners(entries)
    _backfill_labels(entries)
    entries.sort(key=lambda e: e.resource["id"])
    return entries


def _backfill_owners(entries: list[Entry]) -> None:
    """A resource that records only its owner's reference (an outbox row inherited from a task since deleted)
    shows the owner another resource with the same reference names."""
    known = {e.owner_ref: e.resource["owner"] for e in entries if e.owner_ref and e.resource["owner"]}
    for entry in entries:
        if entry.resource["owner"] is None and entry.owner_ref in known:
            entry.resource["owner"] = dict(known[entry.owner_ref])


def _backfill_labels(entries: list[Entry]) -> None:
    """Owners without a label take the label of the most recently updated labelled resource of that owner."""
    best: dict[tuple[str, str], tuple[int, str]] = {}
    for entry in entries:
        owner = entry.resource["owner"]
        label = owner.get("label") if owner else None
        if not owner or not isinstance(label, str) or not label.strip():
            continue
        key = (owner["type"], owner["id"])
        at = entry.resource["updatedAt"] or 0
        if key not in best or at > best[key][0]:
            best[key] = (at, label)
    for entry in entries:
        owner = entry.resource["owner"]
        if owner and not (isinstance(owner.get("label"), str) and owner["label"].strip()):
            found = best.get((owner["type"], owner["id"]))
            if found:
                entry.resource["owner"] = {**owner, "label": found[1]}


def counts(resources: Sequence[Mapping[str, Any]]) -> list[JsonObject]:
    """``[{type, count, byteSize}]`` in the fixed type order."""
    out = []
    for type_ in RESOURCE_TYPES:
        of_type = [r for r in resources if r["type"] == type_]
        out.append({"type": type_, "count": len(of_type), "byteSize": sum(r["byteSize"] for r in of_type)})
    return out


def summary(resources: Sequence[Mapping[str, Any]], gaps: list[dict[str, str]]) -> JsonObject:
    return {"total": len(resources), "counts": counts(resources), "complete": not gaps, "gaps": gaps}
