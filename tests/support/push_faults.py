"""A failing push service: fault plans for the loopback fake (``FakePushService.faults``).

Every well-formed push draws its answer from one ``random.Random(seed)`` in arrival order:

* ``rate_limited``: ``429`` with ``Retry-After`` (seconds);
* ``server_error``: ``500``/``502``/``503`` in turn;
* ``hang``: no answer at all for ``hang_s`` (the sender's timeout ends it; the push is not accepted);
* ``slow_accept``: the push is recorded as accepted (``201``) and the answer comes ``slow_s`` later, after the
  sender's ``AMSG_PUSH_TIMEOUT_MS``: the push went out, the sender cannot know it;
* ``gone``: a share of the *subscriptions* (drawn once per endpoint, at its first push) answer ``410`` to every
  push.

The fake records every push with its decrypted ``messageId`` and ``taskUuid``, so
``FakePushService.accepted_counts()`` shows a duplicate (> 1) or a loss (0) per message id.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass

from tests.support.fake_push import PushFault, ReceivedPush

__all__ = ["PushFaultPlan"]


@dataclass
class PushFaultPlan:
    """Rates per push (exclusive, summing to at most 1) plus the share of subscriptions that are gone."""

    rate_limited: float = 0.0
    server_error: float = 0.0
    hang: float = 0.0
    slow_accept: float = 0.0
    gone: float = 0.0
    retry_after_s: int = 1
    hang_s: float = 30.0
    slow_s: float = 4.0  # past the sender's timeout (the chaos runs set AMSG_PUSH_TIMEOUT_MS to 3 s)
    seed: int = 0

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)
        self._lock = threading.Lock()
        self._errors = 0
        self._gone: dict[str, bool] = {}
        self.injected: dict[str, int] = {}

    def is_gone(self, endpoint_id: str) -> bool:
        """Whether this subscription answers 410: drawn once, at its first push (seeded, in arrival order)."""
        with self._lock:
            if endpoint_id not in self._gone:
                self._gone[endpoint_id] = self._random.random() < self.gone
            return self._gone[endpoint_id]

    def __call__(self, push: ReceivedPush) -> PushFault | None:
        if self.gone and self.is_gone(push.endpoint_id):
            return self._injected("gone", PushFault(410))
        with self._lock:
            draw = self._random.random()
        for kind in ("rate_limited", "server_error", "hang", "slow_accept"):
            rate = getattr(self, kind)
            if draw < rate:
                return self._injected(kind, self._fault(kind))
            draw -= rate
        return None

    def _fault(self, kind: str) -> PushFault:
        if kind == "rate_limited":
            return PushFault(429, headers=(("Retry-After", str(self.retry_after_s)),))
        if kind == "server_error":
            with self._lock:
                self._errors += 1
                return PushFault((500, 502, 503)[self._errors % 3])
        if kind == "hang":
            return PushFault(504, delay_s=self.hang_s)  # recorded as not accepted; the sender times out first
        return PushFault(201, delay_s=self.slow_s)

    def _injected(self, kind: str, fault: PushFault) -> PushFault:
        with self._lock:
            self.injected[kind] = self.injected.get(kind, 0) + 1
        return fault
