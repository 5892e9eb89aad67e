"""Host hooks: plain Python callables in a module named by ``AMSG_HOOKS_MODULE``, shipped in the
layer or the function code. Only ``serialize_by`` is wired so far; the agentic fire hooks are not implemented.

``serialize_by(task) -> str | None`` receives a read-only view of the task (its payload without ``apiKey`` and
``pushSubscription``, plus ``id``, ``uuid``, ``nextSendAt``, ``retryCount``) and returns a group key: tasks of
one user with the same key are delivered one at a time, the earlier due first.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType
from typing import Any

SerializeBy = Callable[[Mapping[str, Any]], object]


@dataclass(frozen=True)
class Hooks:
    serialize_by: SerializeBy | None = None


NO_HOOKS = Hooks()


@cache
def load_hooks(module_name: str | None) -> Hooks:
    """Import the hooks module once per sandbox; a missing module is a configuration error (fail loudly)."""
    if not module_name:
        return NO_HOOKS
    module = importlib.import_module(module_name)
    serialize_by = getattr(module, "serialize_by", None)
    return Hooks(serialize_by=serialize_by if callable(serialize_by) else None)


def task_view(payload: Mapping[str, Any], *, task_id: int, uuid: str, next_send_at: str, retry_count: int):
    """The frozen view hooks see: never the API key or a legacy push subscription."""
    view = {key: value for key, value in payload.items() if key not in ("apiKey", "pushSubscription")}
    view.update({"id": task_id, "uuid": uuid, "nextSendAt": next_send_at, "retryCount": retry_count})
    return MappingProxyType(view)
