"""Create the template's DynamoDB table and SQS queues on an emulator (moto, DynamoDB Local, ElasticMQ).

Tests and the local stack both call these, so the schema under test is always the deployed one.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from amsg_local.template import (
    TemplateError,
    function_events,
    functions_with_event,
    queue_definition,
    table_definition,
    table_ttl_attribute,
)

__all__ = [
    "LocalQueue",
    "claim_queue_logical_id",
    "create_queue_from_template",
    "create_tables_from_template",
    "sqs_consumers",
    "task_queue_logical_id",
]


def create_tables_from_template(
    dynamodb_client: Any,
    template: Mapping[str, Any],
    table_name: str,
    *,
    logical_id: str | None = None,
    timeout_s: float = 60.0,
) -> dict[str, Any]:
    """Create the table (if missing), wait until ACTIVE, enable TTL; return ``describe_table()['Table']``.

    An existing table is left as it is (a second local stack in the same process, or a re-run against a
    long-lived DynamoDB Local); TTL is still (re)applied so a half-created table is completed.
    """
    definition = table_definition(template, logical_id)
    with contextlib.suppress(dynamodb_client.exceptions.ResourceInUseException):
        dynamodb_client.create_table(TableName=table_name, **definition)
    deadline = time.monotonic() + timeout_s
    while True:
        table: dict[str, Any] = dynamodb_client.describe_table(TableName=table_name)["Table"]
        indexes_active = all(
            index.get("IndexStatus", "ACTIVE") == "ACTIVE" for index in table.get("GlobalSecondaryIndexes", [])
        )
        if table["TableStatus"] == "ACTIVE" and indexes_active:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"table {table_name} not ACTIVE after {timeout_s}s")
        time.sleep(0.1)
    ttl = table_ttl_attribute(template, logical_id)
    if ttl:
        current = dynamodb_client.describe_time_to_live(TableName=table_name)["TimeToLiveDescription"]
        if current.get("TimeToLiveStatus") not in ("ENABLED", "ENABLING") or current.get("AttributeName") != ttl:
            dynamodb_client.update_time_to_live(
                TableName=table_name, TimeToLiveSpecification={"Enabled": True, "AttributeName": ttl}
            )
    return table


@dataclass(frozen=True)
class LocalQueue:
    url: str
    arn: str
    dead_letter_url: str | None
    batch_size: int


def sqs_consumers(template: Mapping[str, Any]) -> dict[str, str]:
    """Every SQS event source of the template: queue logical id -> the function it triggers."""
    out: dict[str, str] = {}
    for function in functions_with_event(template, "SQS"):
        for event in function_events(template, function, "SQS"):
            out[str(event.get("Queue", "")).split(".", 1)[0]] = function
    return out


def _queue_of_variable(template: Mapping[str, Any], variable: str) -> str | None:
    """The queue a global environment variable names (``AMSG_QUEUE_URL: !Ref TaskQueue``), if any."""
    variables = ((template.get("Globals") or {}).get("Function") or {}).get("Environment", {}).get("Variables") or {}
    value = variables.get(variable)
    return str(value["Ref"]) if isinstance(value, Mapping) and "Ref" in value else None


def task_queue_logical_id(template: Mapping[str, Any]) -> tuple[str, str]:
    """``(consumer_function, queue_logical_id)`` of the task queue: the one ``AMSG_QUEUE_URL`` names, or the
    template's only SQS event source."""
    consumers = sqs_consumers(template)
    named = _queue_of_variable(template, "AMSG_QUEUE_URL")
    if named in consumers:
        return consumers[named], named
    if len(consumers) != 1:
        raise TemplateError(f"expected exactly one function with an SQS event, found {sorted(consumers.values())}")
    ((queue, consumer),) = consumers.items()
    return consumer, queue


def claim_queue_logical_id(template: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(claimer_function, queue_logical_id)`` of the claim queue ``AMSG_CLAIM_QUEUE_URL`` names, or None
    when the template fans out no claims."""
    named = _queue_of_variable(template, "AMSG_CLAIM_QUEUE_URL")
    consumers = sqs_consumers(template)
    return (consumers[named], named) if named in consumers else None


def create_queue_from_template(
    sqs_client: Any, template: Mapping[str, Any], queue_name: str, *, logical_id: str | None = None
) -> LocalQueue:
    """Create the task queue (and its dead-letter queue, with the template's redrive policy)."""
    if logical_id is None:
        _, logical_id = task_queue_logical_id(template)
    props = queue_definition(template, logical_id)
    attributes: dict[str, str] = {}
    for key in ("VisibilityTimeout", "MessageRetentionPeriod", "DelaySeconds", "ReceiveMessageWaitTimeSeconds"):
        if key in props:
            attributes[key] = str(props[key])
    dead_letter_url = None
    redrive = props.get("RedrivePolicy")
    if isinstance(redrive, dict) and redrive.get("deadLetterTargetArn"):
        dlq_logical = str(redrive["deadLetterTargetArn"]).split(".", 1)[0]
        dlq_props = queue_definition(template, dlq_logical)
        dlq_attributes = {k: str(dlq_props[k]) for k in ("MessageRetentionPeriod",) if k in dlq_props}
        dead_letter_url = sqs_client.create_queue(QueueName=f"{queue_name}-dlq", Attributes=dlq_attributes)["QueueUrl"]
        dlq_arn = sqs_client.get_queue_attributes(QueueUrl=dead_letter_url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        attributes["RedrivePolicy"] = json.dumps(
            {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": int(redrive.get("maxReceiveCount", 5))}
        )
    url = sqs_client.create_queue(QueueName=queue_name, Attributes=attributes)["QueueUrl"]
    arn = sqs_client.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    batch_size = 10
    consumer = sqs_consumers(template).get(logical_id)
    if consumer is not None:
        (event,) = function_events(template, consumer, "SQS")
        batch_size = int(event.get("BatchSize", 10))
    return LocalQueue(url=url, arn=arn, dead_letter_url=dead_letter_url, batch_size=batch_size)
