"""``send-notifications`` on the multi-tenant line: one tenant's due work, on demand (docs/tenancy-data.md).

It runs the tick's own claim-and-enqueue for the cron token's tenant only, in the tenant's scoped context: due
tasks are claimed with the same conditional writes and handed to the queue, whose consumer delivers them (on
the local stack too, without a manual tick). Nothing is delivered inside the request, so the route answers within
API Gateway's limit whatever the backlog, and a task claimed here cannot also be claimed by the scheduled tick.
"""

from __future__ import annotations

import uuid as uuid_lib
from collections.abc import Callable

from amsg.config import missing_vapid_keys
from amsg.context import AppContext
from amsg.engine.summary import TickSummary
from amsg.engine.tick import claim_and_enqueue
from amsg.errors import api_error
from amsg.jsonio import JsonObject
from amsg.tenancy.scope import tenant_of
from amsg.timeutil import iso_from_ms

SEND_NOTIFICATIONS_MESSAGE = "VAPID 配置缺失，无法发送推送通知"


def run_tenant_due_work(ctx: AppContext, *, remaining_ms: Callable[[], int] = lambda: 25_000) -> JsonObject:
    """Claim and enqueue the scoped tenant's due tasks; the reference's summary shape (informational).

    ``totalTasks`` counts the due tasks seen, ``successCount`` those handed to delivery, ``failedCount`` those
    whose claim or hand-over failed; ``details`` carries the reference's keys (stale tasks are settled here as
    in the tick) plus ``enqueuedTasks`` and ``delivery: "queued"``. VAPID incomplete: 500 VAPID_CONFIG_ERROR."""
    if tenant_of(ctx) is None:
        raise ValueError("send-notifications runs in a tenant's scoped context")
    if ctx.delivery.push_sender is None:
        raise api_error(
            "VAPID_CONFIG_ERROR",
            SEND_NOTIFICATIONS_MESSAGE,
            details={"missingKeys": missing_vapid_keys(ctx.settings, ctx.secrets) or ["VAPID"]},
        )
    started = ctx.now_ms()
    summary = TickSummary()
    claim_and_enqueue(ctx, summary, remaining_ms, f"cron:{uuid_lib.uuid4()}")
    now = ctx.now_ms()
    return {
        "totalTasks": summary.due,
        "successCount": summary.enqueued,
        "failedCount": len(summary.failed) + summary.enqueue_failed,
        "processedAt": iso_from_ms(now),
        "executionTime": max(0, now - started),
        "details": {
            "claimSkippedTasks": summary.claim_skipped,
            "serializeSkippedTasks": summary.serialize_skipped,
            "deletedOnceOffTasks": 0,
            "updatedRecurringTasks": 0,
            "staleTasks": summary.stale,
            "deferredTasks": [],
            "cancelledTasks": [],
            "reasoningSkippedTasks": [],
            "redeliveredTasks": [],
            "failedTasks": summary.failed,
            "enqueuedTasks": summary.enqueued,
            "delivery": "queued",
        },
    }
