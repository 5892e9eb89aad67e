"""SQS → deliver each claimed task; partial batch failures only for infrastructure errors.

Task outcomes are written to DynamoDB before the record is acked, so a failed task is never redelivered by SQS.
"""

from amsg import runtime
from amsg.engine.messages import parse_task_message
from amsg.engine.runner import run_message
from amsg.observability import logger, metrics
from amsg.timeutil import parse_iso_ms
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

processor = BatchProcessor(event_type=EventType.SQS)


def record_handler(record: SQSRecord, lambda_context: LambdaContext) -> dict:
    """One record; the batch processor passes this invocation's context (its remaining time bounds the run)."""
    ctx = runtime.app_context()
    message = parse_task_message(record.body)
    # this record's log lines carry the id of the API request that created the task (or of the claiming tick)
    logger.set_correlation_id(message.correlation_id if message is not None else None)
    try:
        summary = run_message(
            ctx,
            message,
            remaining_ms=lambda_context.get_remaining_time_in_millis,
            owner=f"run:{lambda_context.aws_request_id}",
        )
    finally:
        logger.set_correlation_id(None)
    metrics.add_metric(name="TasksDelivered", unit="Count", value=summary.get("successCount", 0))
    metrics.add_metric(name="DeliveryFailures", unit="Count", value=summary.get("failedCount", 0))
    due_ms = parse_iso_ms(message.next_send_at) if message is not None else None
    if summary.get("successCount") and due_ms is not None:  # due → pushed, queue wait and generation included
        metrics.add_metric(name="DeliveryLatency", unit="Milliseconds", value=max(0, ctx.now_ms() - due_ms))
    return summary


@metrics.log_metrics
@logger.inject_lambda_context(log_event=False)
def handler(event: dict, context: LambdaContext) -> dict:
    return process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
