"""The tick and per-task summaries (the reference's shapes): informational, logged, returned by runTask."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from amsg.timeutil import iso_from_ms


@dataclass
class DeliverySummary:
    """The reference's per-run summary (``runTask().summary``; run_task produces one with totalTasks 1)."""

    total_tasks: int = 0
    success_count: int = 0
    failed_count: int = 0
    claim_skipped: int = 0
    serialize_skipped: int = 0
    deleted_once_off: int = 0
    updated_recurring: int = 0
    stale: list[dict[str, Any]] = field(default_factory=list)
    deferred: list[dict[str, Any]] = field(default_factory=list)
    cancelled: list[dict[str, Any]] = field(default_factory=list)
    reasoning_skipped: list[dict[str, Any]] = field(default_factory=list)
    redelivered: list[dict[str, Any]] = field(default_factory=list)
    failed: list[dict[str, Any]] = field(default_factory=list)
    unconfirmed: list[dict[str, Any]] = field(default_factory=list)  # pushes whose outcome is unknown

    def as_dict(self, *, started_ms: int, now_ms: int) -> dict[str, Any]:
        result = {
            "totalTasks": self.total_tasks,
            "successCount": self.success_count,
            "failedCount": self.failed_count,
            "processedAt": iso_from_ms(now_ms),
            "executionTime": max(0, now_ms - started_ms),
            "details": {
                "claimSkippedTasks": self.claim_skipped,
                "serializeSkippedTasks": self.serialize_skipped,
                "deletedOnceOffTasks": self.deleted_once_off,
                "updatedRecurringTasks": self.updated_recurring,
                "staleTasks": self.stale,
                "deferredTasks": self.deferred,
                "cancelledTasks": self.cancelled,
                "reasoningSkippedTasks": self.reasoning_skipped,
                "redeliveredTasks": self.redelivered,
                "failedTasks": self.failed,
            },
        }
        if self.unconfirmed:  # only when it happened: the reference's shape otherwise
            result["details"]["unconfirmedTasks"] = self.unconfirmed  # type: ignore[index]
        return result


@dataclass
class TickSummary:
    """What one tick did: it only claims, settles stale tasks and enqueues."""

    scheduled_time: str | None = None
    due: int = 0
    claimed: int = 0
    enqueued: int = 0
    claim_skipped: int = 0
    serialize_skipped: int = 0
    enqueue_failed: int = 0
    stale: list[dict[str, Any]] = field(default_factory=list)
    failed: list[dict[str, Any]] = field(default_factory=list)
    stopped_by: str | None = (
        None  # 'time' | 'limit' | 'vapid' (a claim job: 'backlog' | 'contended' | 'tenant_inactive')
    )
    housekeeping: dict[str, Any] = field(default_factory=dict)
    tenants: int | None = None  # tenants served (the multi-tenant line only)
    claim_jobs: int | None = None  # claim jobs sent (claim fan-out only)
    claim_jobs_failed: int = 0

    def as_dict(self, *, started_ms: int, now_ms: int) -> dict[str, Any]:
        result: dict[str, Any] = {
            "scheduledTime": self.scheduled_time,
            "dueTasks": self.due,
            "claimedTasks": self.claimed,
            "enqueuedTasks": self.enqueued,
            "processedAt": iso_from_ms(now_ms),
            "executionTime": max(0, now_ms - started_ms),
            "details": {
                "claimSkippedTasks": self.claim_skipped,
                "serializeSkippedTasks": self.serialize_skipped,
                "enqueueFailedTasks": self.enqueue_failed,
                "staleTasks": self.stale,
                "failedTasks": self.failed,
                "stoppedBy": self.stopped_by,
                "housekeeping": self.housekeeping,
            },
        }
        if self.tenants is not None:
            result["tenants"] = self.tenants
        if self.claim_jobs is not None:
            result["claimJobs"] = {"sent": self.claim_jobs, "failed": self.claim_jobs_failed}
        return result
