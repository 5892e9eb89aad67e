"""SQS (the claim queue) → claim one page of due tasks per job, enqueue them for run_task, continue the chain.

The tick fans the due work out as claim jobs (amsg.engine.claim_jobs); as many claimers run at once as the claim
queue's event source allows. A job that raises is reported as a failed record: SQS delivers it again after the
claim queue's visibility timeout (its claimed tasks, if any, come back when their lease ends)."""

from typing import Any

from amsg import runtime
from amsg.engine.claim_jobs import parse_claim_job, run_claim_job
from amsg.engine.summary import TickSummary
from amsg.hooks import report_error
from amsg.observability import logger, metrics
from aws_lambda_powertools.utilities.typing import LambdaContext

runtime.prepare(storage=True, secrets=("master_key", "vapid_private_key"))  # init-phase work (docs/decisions.md)


@metrics.log_metrics
@logger.inject_lambda_context(log_event=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    ctx = runtime.app_context()
    summary = TickSummary()
    failures = []
    for record in (event or {}).get("Records") or []:
        job = parse_claim_job(record.get("body"))
        if job is None:
            continue  # malformed: dropped (the next tick fans the shard out again)
        try:
            run_claim_job(
                ctx,
                job,
                remaining_ms=context.get_remaining_time_in_millis,
                owner=f"claim:{context.aws_request_id}",
                summary=summary,
            )
        except Exception as exc:  # the job comes back after the claim queue's visibility timeout
            report_error(ctx.settings.hooks_module, "claimer", exc)
            logger.exception("claim job failed", extra={"error": type(exc).__name__})
            failures.append({"itemIdentifier": record.get("messageId", "")})
    metrics.add_metric(name="TasksClaimed", unit="Count", value=summary.claimed)
    metrics.add_metric(name="TasksEnqueued", unit="Count", value=summary.enqueued)
    metrics.add_metric(name="ClaimsSkipped", unit="Count", value=summary.claim_skipped)
    metrics.add_metric(name="EnqueueFailures", unit="Count", value=summary.enqueue_failed)
    result = summary.as_dict(started_ms=ctx.now_ms(), now_ms=ctx.now_ms())
    (logger.info if summary.due or summary.stopped_by else logger.debug)(
        "claim job finished", extra={"summary": result}
    )
    return {"batchItemFailures": failures, "summary": result}
