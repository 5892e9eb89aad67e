"""A hooks module for tests (AMSG_HOOKS_MODULE=tests.support.hooks_owner): ``resolve_owner`` attributes
credentials ``ext/*``, state of namespace ``hooked`` and tasks with ``metadata.app == "ext"`` to the owner
``app/ext``; it raises for a task with ``metadata.explode``. Every input it got is kept in ``CALLS``."""

from __future__ import annotations

from typing import Any

EXT = {"type": "app", "id": "ext", "label": "External app"}
CALLS: list[dict[str, Any]] = []


async def resolve_owner(info: dict[str, Any]) -> dict[str, Any] | None:
    CALLS.append(info)
    metadata = (info.get("payload") or {}).get("metadata") or {} if info["type"] == "task" else {}
    if metadata.get("explode"):
        raise RuntimeError("resolver broke")
    if (
        (info["type"] == "credential" and str(info["credId"]).startswith("ext/"))
        or (info["type"] == "state" and info["namespace"] == "hooked")
        or metadata.get("app") == "ext"
    ):
        return {"owner": EXT, "kind": "hooked"}
    return None
