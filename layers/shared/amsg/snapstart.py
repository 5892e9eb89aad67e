"""Lambda SnapStart: what must not travel in a snapshot, and what each restored sandbox makes anew.

With ``SnapStart=PublishedVersions`` (template.yaml) Lambda runs a version's init once, snapshots the memory and
resumes many sandboxes from that one image. Whatever init left behind is then shared by all of them: the
``random`` generator's state, open connections, boto3 clients holding the credentials of the init sandbox, and
secrets cached with an age measured on a clock that jumped. So:

* before the snapshot, every registered reset runs (nothing built during init reaches the image);
* after each restore, ``random`` is reseeded from the OS and every reset runs again, so the first request
  builds its context (table sessions, SSM reader and its cache, push and LLM clients) with this sandbox's
  credentials and clock. ``secrets`` and ``uuid.uuid4`` read ``os.urandom`` and need nothing.

The hooks are registered through the runtime's ``snapshot_restore_py`` module, which exists only in a Lambda
sandbox initialised for SnapStart; anywhere else :func:`install` does nothing. Resets are plain callables the
parts that cache state register with :func:`on_reset` (the composition root registers "forget the context").
This module imports nothing of the package, so any part may register without a dependency loop.
See docs/operations.md for when SnapStart pays.
"""

from __future__ import annotations

import importlib
import logging
import os
import random
from collections.abc import Callable, Mapping
from typing import Any

_resets: list[Callable[[], None]] = []
_installed: list[Any] = []  # the runtime module the hooks were registered with (once per process)
_log = logging.getLogger("amsg.snapstart")

SNAPSTART_INIT = "snap-start"  # AWS_LAMBDA_INITIALIZATION_TYPE during a SnapStart init


def on_reset(callback: Callable[[], None]) -> Callable[[], None]:
    """Run ``callback`` before the snapshot and after every restore (idempotent: it may run twice)."""
    if callback not in _resets:
        _resets.append(callback)
    return callback


def before_snapshot() -> None:
    """Drop everything init built that holds connections, credentials or cached secrets."""
    _run_resets()


def after_restore() -> None:
    """Give this restored sandbox its own random state and its own clients, credentials and secret cache."""
    random.seed()  # from os.urandom: two sandboxes restored from one image no longer draw the same numbers
    _run_resets()


def _run_resets() -> None:
    for callback in list(_resets):
        try:
            callback()
        except Exception as exc:  # one failed reset must not keep the others from running
            _log.warning("snapstart reset failed: %s", type(exc).__name__)


def install(env: Mapping[str, str] | None = None, runtime_module: Any = None) -> bool:
    """Register the hooks with Lambda's runtime when this init is a SnapStart init; True when registered.

    ``runtime_module`` stands in for ``snapshot_restore_py`` in tests. Outside a SnapStart init nothing is
    imported (no cost on ordinary cold starts or locally).
    """
    if _installed:
        return True
    env = os.environ if env is None else env
    if runtime_module is None:
        if env.get("AWS_LAMBDA_INITIALIZATION_TYPE") != SNAPSTART_INIT:
            return False
        try:
            runtime_module = importlib.import_module("snapshot_restore_py")
        except ImportError:
            return False
    runtime_module.register_before_snapshot(before_snapshot)
    runtime_module.register_after_restore(after_restore)
    _installed.append(runtime_module)
    return True
