"""Lease heartbeat for a delivery in progress (see docs/delivery.md): renewed every ``heartbeat_ms`` by a
background thread inside the invocation, fenced by the claim version, stopped in ``finally``.

Losing the lease (renewal refused: the task was cancelled, superseded, settled or taken over) sets ``lost``;
the pipeline checks it before every push and stops, so a worker that lost its claim sends nothing more.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from amsg.observability import logger


class LeaseKeeper:
    def __init__(self, renew: Callable[[], bool], interval_s: float) -> None:
        self._renew = renew
        self._interval_s = interval_s
        self._stop = threading.Event()
        self.lost = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> LeaseKeeper:
        if self._interval_s > 0:
            self._thread = threading.Thread(target=self._run, name="lease-heartbeat", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                if not self._renew():
                    if not self._stop.is_set():
                        self.lost.set()
                        logger.warning("delivery lease lost; stopping before any further push")
                    return
            except Exception as exc:  # a throttled renew is not a lost lease; try again next beat
                logger.warning("lease renewal failed", extra={"error": type(exc).__name__})
