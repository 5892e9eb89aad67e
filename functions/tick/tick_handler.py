"""EventBridge Scheduler (every minute) → claim due tasks and enqueue them. Delivery is run_task's."""

from typing import Any

from amsg import runtime
from amsg.engine.summary import TickResult
from amsg.engine.tick import run_tick
from amsg.hooks import report_error
from amsg.observability import logger, metrics
from aws_lambda_powertools.utilities.typing import LambdaContext

runtime.prepare(storage=True, secrets=("master_key", "vapid_private_key"))  # init-phase work (docs/decisions.md)


@metrics.log_metrics
@logger.inject_lambda_context(log_event=False, correlation_id_path="executionId")  # the scheduler's execution
def handler(event: dict[str, Any], context: LambdaContext) -> TickResult:
    ctx = runtime.app_context()
    try:
        summary = run_tick(
            ctx,
            scheduled_time=(event or {}).get("scheduledTime"),
            remaining_ms=context.get_remaining_time_in_millis,
            owner=f"tick:{context.aws_request_id}",
        )
    except Exception as exc:  # the host hears about it; the tasks stay due for the next tick
        report_error(ctx.settings.hooks_module, "tick", exc)
        raise
    metrics.add_metric(name="TasksDue", unit="Count", value=summary["dueTasks"])
    metrics.add_metric(name="TasksClaimed", unit="Count", value=summary["claimedTasks"])
    metrics.add_metric(name="TasksEnqueued", unit="Count", value=summary["enqueuedTasks"])
    metrics.add_metric(name="ClaimsSkipped", unit="Count", value=summary["details"]["claimSkippedTasks"])
    metrics.add_metric(name="EnqueueFailures", unit="Count", value=summary["details"]["enqueueFailedTasks"])
    return summary
