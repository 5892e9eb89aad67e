"""Drive the delivery engine in process the way AWS does: the tick handler with a ScheduleV2 input, then the
run_task handler with SQS-shaped events built from what the tick really enqueued (partial-batch semantics)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import boto3
from amsg_local.delivery import sqs_event

from tests.support.inprocess import LambdaContext, load_handler_module

ROOT = Path(__file__).resolve().parents[2]


class EngineHarness:
    def __init__(self, queue_url: str, queue_arn: str, sqs: Any = None) -> None:
        self.queue_url = queue_url
        self.queue_arn = queue_arn
        self.sqs = sqs or boto3.client("sqs", region_name="us-east-1")  # the caller's client saves building one
        self.tick_module = load_handler_module(ROOT / "functions/tick/tick_handler.py")
        self.run_module = load_handler_module(ROOT / "functions/run_task/run_task_handler.py")
        self.claimer_module = load_handler_module(ROOT / "functions/claimer/claimer_handler.py")
        self.last_run_results: list[dict[str, Any]] = []

    def tick(self, scheduled_time: str | None = None) -> dict[str, Any]:
        event = {"scheduledTime": scheduled_time or "2030-01-01T00:00:00Z", "executionId": str(uuid.uuid4())}
        return self.tick_module.handler(event, LambdaContext(function_name="tick", remaining_ms=55_000))

    def receive(self, max_messages: int = 10, *, queue_url: str | None = None) -> list[dict[str, Any]]:
        response = self.sqs.receive_message(
            QueueUrl=queue_url or self.queue_url,
            MaxNumberOfMessages=max_messages,
            AttributeNames=["All"],
            VisibilityTimeout=0,
        )
        return response.get("Messages", [])

    def sqs_event(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """What Lambda's event source mapping would hand run_task for these ReceiveMessage results."""
        return sqs_event(messages, self.queue_arn)

    def run(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        context = LambdaContext(function_name="run_task", remaining_ms=110_000, aws_request_id=str(uuid.uuid4()))
        result = self.run_module.handler(self.sqs_event(messages), context)
        failed = {item["itemIdentifier"] for item in result.get("batchItemFailures", [])}
        for message in messages:
            if message["MessageId"] not in failed:
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
        return result

    def drain(self) -> int:
        handled = 0
        while True:
            messages = self.receive()
            if not messages:
                return handled
            self.run(messages)
            handled += len(messages)

    def tick_and_drain(self) -> dict[str, Any]:
        summary = self.tick()
        self.drain()
        return summary

    def queued_bodies(self) -> list[dict[str, Any]]:
        return [json.loads(m["Body"]) for m in self.receive()]
