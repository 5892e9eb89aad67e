"""What one delivery run works with besides the context: its collaborators and budget (:class:`DeliveryEnv`,
built by :func:`delivery_env`), what a run returns (:class:`Outcome`), how it stops (:class:`Cancelled`), and the
sandbox's worker pools."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from amsg.context import AppContext
from amsg.hooks import task_view
from amsg.ports import CapCharge, LlmClient, LlmReply, LlmRequest, PushSender, PushSubscriptionRow, TaskRow
from amsg.task_payload import StoredPayload
from amsg.timeutil import iso_from_ms


class Cancelled(Exception):
    """The task was cancelled, superseded or taken over while we delivered it."""

    def __init__(self, status: str = "cancelled_mid_delivery") -> None:
        super().__init__(status)
        self.status = status


@dataclass
class DeliveryEnv:
    """What a run needs besides the context: collaborators and its own budget."""

    push_sender: PushSender | None
    llm: LlmClient | None
    lease_lost: Callable[[], bool] = lambda: False
    sleep: Callable[[float], None] = lambda seconds: None
    llm_timeout_s: Callable[[], float] = lambda: 300.0
    pacing_ms: int = 1500
    max_retries: int | None = None  # overrides settings.max_delivery_retries (instant path: 2)
    defer_supported: bool = True  # a hook may defer the fire (not inside POST /schedule-message)
    cap_charges: list[CapCharge] = field(default_factory=list)  # frequency caps the next push claim counts
    # what run_task read with the task in its one read (None: read the subscription when needed)
    prefetched: tuple[PushSubscriptionRow | None] | None = None
    subscription_row: PushSubscriptionRow | None = None  # the stored subscription pushed to (marked gone on 410)
    prefetched_policy: tuple[Any, ...] | None = None
    outbox_seq: int | None = None
    adopt_lease: Callable[[], int] | None = None  # the append adopts the claim with this lease (ms)
    owner: str = ""
    # the instant path's time left to answer (ms): no push is claimed once the answer can no longer be a success
    time_left_ms: Callable[[], int] | None = None


@dataclass
class Outcome:
    messages_sent: int = 0
    pushed: int = 0
    redelivered: bool = False
    reasoning_error: str | None = None
    deferred_until_ms: int | None = None  # a hook deferred the fire: due again then, no retry consumed
    policy_deferred: bool = False  # the deferral is the user's delivery policy (quiet hours or a cap)
    unmarked: list[str] = field(default_factory=list)  # pushed rows whose delivered mark goes with the settle
    unconfirmed: int = 0  # rows whose push outcome is unknown: they and the rows after them wait for the pull
    batch_ids: tuple[str, ...] = ()  # the message ids of the occurrence's batch (of its rows the task may name)
    taken_elsewhere: int = 0  # rows another run had claimed for sending: their outcome is that run's
    extra: dict[str, Any] = field(default_factory=dict)


def delivery_env(ctx: AppContext, *, remaining_ms: Callable[[], int] | None = None) -> DeliveryEnv:
    """Collaborators for a delivery: push sender (None without VAPID), LLM client, pacing, LLM budget."""

    cap_s = ctx.settings.llm_timeout_ms / 1000

    def llm_timeout_s() -> float:
        """The LLM call never outlives the invocation: remaining time minus a margin to write the outcome."""
        if remaining_ms is None:
            return cap_s
        return max(1.0, min(cap_s, (remaining_ms() - 10_000) / 1000))

    return DeliveryEnv(
        push_sender=ctx.delivery.push_sender,
        llm=_LlmOnFirstUse(ctx),
        sleep=ctx.delivery.sleep,
        llm_timeout_s=llm_timeout_s,
        pacing_ms=ctx.settings.push_pacing_ms,
    )


class _LlmOnFirstUse:
    """The context's LLM client, built when a delivery first needs one: a batch of fixed messages never pays
    for the HTTP client (its TLS context alone costs milliseconds of a cold start)."""

    def __init__(self, ctx: AppContext) -> None:
        self._ctx = ctx

    def complete(self, request: LlmRequest, *, timeout_s: float) -> LlmReply:
        return self._ctx.delivery.llm.complete(request, timeout_s=timeout_s)


_pools: dict[tuple[str, int], ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()


def sandbox_pool(name: str, workers: int) -> ThreadPoolExecutor:
    """Worker threads of this sandbox (tick claims, a batch's records), built on first use (never at import)
    and reused by later invocations."""
    with _pools_lock:
        pool = _pools.get((name, workers))
        if pool is None:
            pool = _pools[(name, workers)] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        return pool


def row_view(payload: StoredPayload, row: TaskRow) -> Any:
    """The read-only task view a hook sees for a claimed row (its occurrence as ISO text, the hooks' wire form)."""
    return task_view(
        payload,
        task_id=row.id,
        uuid=row.uuid,
        next_send_at=iso_from_ms(row.next_send_at_ms),
        retry_count=row.retry_count,
    )
