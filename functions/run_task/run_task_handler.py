"""SQS → deliver each claimed task; partial batch failures only for infrastructure errors.

The records of a batch are delivered at the same time and share storage round trips (docs/delivery.md). Task
outcomes are written to DynamoDB before the record is acked, so a failed task is never redelivered by SQS.
"""

import functools
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from amsg import runtime
from amsg.context import AppContext
from amsg.engine.messages import TaskMessage, parse_task_message
from amsg.engine.run_task import RECORD_WORKERS, run_message, run_together
from amsg.engine.summary import RunResult
from amsg.observability import emit_metric, logger, metric_batch, metrics, tenant_dimension
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

# init-phase work (docs/decisions.md); every batch pushes, so the push stack's imports too
runtime.prepare(storage=True, secrets=("master_key", "vapid_private_key"), push=True)


class ConcurrentBatchProcessor(BatchProcessor):
    """Partial batch responses as usual; the records run together, on this sandbox's own worker threads."""

    _pool: ThreadPoolExecutor | None = None
    # the current batch's tenants' keys, read once per batch (the multi-tenant line; docs/tenancy-data.md)
    tenant_keys: dict[str, str | None] | None = None
    # the current batch's messages by (message id, body), parsed once for the grouping and the record handler
    messages: dict[tuple[object, object], TaskMessage | None] | None = None

    def process(self) -> list[tuple[Any, ...]]:
        self.tenant_keys = {}
        if self._pool is None:  # built on the first batch, never at import
            self._pool = ThreadPoolExecutor(max_workers=RECORD_WORKERS, thread_name_prefix="record")
        records = [functools.partial(self._process_record, record) for record in self.records]
        messages: dict[tuple[object, object], TaskMessage | None] = {}
        for record in self.records:
            body = record.get("body")
            if isinstance(body, str):  # (anything else is the record handler's to refuse)
                messages[(record.get("messageId"), body)] = parse_task_message(body)
        self.messages = messages
        users = [_user_of(messages.get((record.get("messageId"), record.get("body")))) for record in self.records]
        return run_together(runtime.app_context(), records, keys=users, pool=self._pool)

    def message_of(self, record: SQSRecord) -> TaskMessage | None:
        """The record's message as :meth:`process` parsed it (a malformed one was dropped and said so there)."""
        key = (record.message_id, record.body)
        messages = self.messages or {}
        return messages[key] if key in messages else parse_task_message(record.body)


def _user_of(message: TaskMessage | None) -> str | None:
    """The record's user, with its tenant on the multi-tenant line (a user's records run in batch order, one
    after the other); None when malformed (the record handler then drops it)."""
    if message is None:
        return None
    return f"{message.tenant_id}\x1f{message.user_id}" if message.tenant_id is not None else message.user_id


processor = ConcurrentBatchProcessor(event_type=EventType.SQS)
_metrics_lock = threading.Lock()  # records finish on several threads; the metric set is shared


def record_handler(record: SQSRecord, lambda_context: LambdaContext) -> RunResult:
    """One record; the batch processor passes this invocation's context (its remaining time bounds the run)."""
    ctx = runtime.app_context()
    message = processor.message_of(record)
    # this record's log lines carry the id of the API request that created the task (or of the claiming tick);
    # a per-thread key, as the batch's records run side by side
    logger.thread_safe_append_keys(correlation_id=message.correlation_id if message is not None else None)
    try:
        summary = run_message(
            ctx,
            message,
            remaining_ms=lambda_context.get_remaining_time_in_millis,
            owner=f"run:{lambda_context.aws_request_id}:{record.message_id}",
            tenant_keys=processor.tenant_keys,
        )
    finally:
        logger.thread_safe_remove_keys(["correlation_id"])
    with _metrics_lock:  # DeliveryLatency is the engine's (amsg.observability.record_delivery_latency)
        metrics.add_metric(name="TasksDelivered", unit="Count", value=summary.get("successCount", 0))
        metrics.add_metric(name="DeliveryFailures", unit="Count", value=summary.get("failedCount", 0))
    _tenant_counts(ctx, message, summary)
    return summary


def _tenant_counts(ctx: AppContext, message: TaskMessage | None, summary: RunResult) -> None:
    """The multi-tenant line: the record's counts again under its ``Tenant`` dimension (a named tenant's id, else
    ``other``; docs/operations.md). Emitted at once, as the batch's metric set has one dimension set."""
    tenant = tenant_dimension(getattr(message, "tenant_id", None), ctx.settings.metrics_tenants)
    if tenant is None or not ctx.settings.multi_tenant:
        return
    emit_metric("TasksDelivered", "Count", summary.get("successCount", 0), Tenant=tenant)
    emit_metric("DeliveryFailures", "Count", summary.get("failedCount", 0), Tenant=tenant)


@metrics.log_metrics
@logger.inject_lambda_context(log_event=False)
def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    with metric_batch():  # the batch's DeliveryLatency, PushLatency, ... values in a few EMF documents
        return process_partial_response(
            event=event, record_handler=record_handler, processor=processor, context=context
        )
