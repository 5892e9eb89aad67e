"""The tick and per-task summaries (the reference's shapes): informational, logged, returned by runTask."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NotRequired, TypedDict

from amsg.timeutil import iso_from_ms


class TaskEntry(TypedDict, total=False):
    """One task in a summary's lists (``staleTasks``, ``failedTasks``, ...): which task and what became of it."""

    taskId: int
    taskUuid: str
    reason: str
    status: str
    action: str  # a stale task: expired | fast_forwarded
    nextSendAt: str
    skippedCount: int
    retryAfter: str
    retryCount: int
    nextRetryAt: str
    permanent: bool
    updateError: str
    messageDelivered: bool
    pushedCount: int
    unconfirmedCount: int


Housekeeping = dict[str, int | str]
"""The tick's housekeeping: counts by name (``deletedSettledTasks``, ...), or the class of the error that stopped
one step (``settledTasksError``, ...)."""


class RunDetails(TypedDict):
    claimSkippedTasks: int
    serializeSkippedTasks: int
    deletedOnceOffTasks: int
    updatedRecurringTasks: int
    staleTasks: list[TaskEntry]
    deferredTasks: list[TaskEntry]
    cancelledTasks: list[TaskEntry]
    reasoningSkippedTasks: list[TaskEntry]
    redeliveredTasks: list[TaskEntry]
    failedTasks: list[TaskEntry]
    unconfirmedTasks: NotRequired[list[TaskEntry]]


class RunResult(TypedDict, total=False):
    """What run_task returns and logs: the reference's per-run summary, or why the message was skipped."""

    totalTasks: int
    successCount: int
    failedCount: int
    processedAt: str
    executionTime: int
    details: RunDetails
    taskUuid: str
    skipped: str  # malformed_message | claim_not_current | tenant_inactive | not_configured | no_time_left | ...


class TickDetails(TypedDict):
    claimSkippedTasks: int
    serializeSkippedTasks: int
    enqueueFailedTasks: int
    staleTasks: list[TaskEntry]
    failedTasks: list[TaskEntry]
    stoppedBy: str | None
    housekeeping: Housekeeping


class ClaimJobCounts(TypedDict):
    sent: int
    failed: int


class TickResult(TypedDict):
    """What a tick (or a claim job) returns and logs."""

    scheduledTime: str | None
    dueTasks: int
    claimedTasks: int
    enqueuedTasks: int
    processedAt: str
    executionTime: int
    details: TickDetails
    tenants: NotRequired[int]
    claimJobs: NotRequired[ClaimJobCounts]


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
    stale: list[TaskEntry] = field(default_factory=list)
    deferred: list[TaskEntry] = field(default_factory=list)
    cancelled: list[TaskEntry] = field(default_factory=list)
    reasoning_skipped: list[TaskEntry] = field(default_factory=list)
    redelivered: list[TaskEntry] = field(default_factory=list)
    failed: list[TaskEntry] = field(default_factory=list)
    unconfirmed: list[TaskEntry] = field(default_factory=list)  # pushes whose outcome is unknown

    def as_dict(self, *, started_ms: int, now_ms: int) -> RunResult:
        result: RunResult = {
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
            result["details"]["unconfirmedTasks"] = self.unconfirmed
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
    stale: list[TaskEntry] = field(default_factory=list)
    failed: list[TaskEntry] = field(default_factory=list)
    stopped_by: str | None = (
        None  # 'time' | 'limit' | 'vapid' (a claim job: 'backlog' | 'contended' | 'tenant_inactive')
    )
    housekeeping: Housekeeping = field(default_factory=dict)
    tenants: int | None = None  # tenants served (the multi-tenant line only)
    claim_jobs: int | None = None  # claim jobs sent (claim fan-out only)
    claim_jobs_failed: int = 0

    def as_dict(self, *, started_ms: int, now_ms: int) -> TickResult:
        result: TickResult = {
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
