"""The delivery queue (SQS): the tick enqueues ``{userId, uuid, claimVersion, nextSendAt}`` per claim."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import boto3
from botocore.config import Config

from amsg import jsonio
from amsg.jsonio import JsonObject


class SqsTaskQueue:
    def __init__(self, queue_url: str, *, client_options: Mapping[str, str] | None = None) -> None:
        self.queue_url = queue_url
        self._client_options = dict(client_options or {})  # region, endpoint, keys the context's mapping states
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = boto3.client(
                "sqs", config=Config(retries={"mode": "standard", "max_attempts": 5}), **self._client_options
            )
        return self._client

    def send_many(self, messages: list[JsonObject]) -> list[int]:
        failed: list[int] = []
        for offset in range(0, len(messages), 10):
            chunk = messages[offset : offset + 10]
            entries = [{"Id": str(offset + i), "MessageBody": jsonio.dumps(message)} for i, message in enumerate(chunk)]
            try:
                response = self.client.send_message_batch(QueueUrl=self.queue_url, Entries=entries)
            except Exception:
                failed.extend(range(offset, offset + len(chunk)))
                continue
            failed.extend(int(entry["Id"]) for entry in response.get("Failed", []))
        return failed

    def backlog(self) -> int | None:
        """SQS's approximate count of visible and in-flight messages (a minute behind at worst); None when it
        cannot be read (then nothing pauses: leases fence what is claimed twice)."""
        names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        try:
            found = self.client.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=names)["Attributes"]
            return sum(int(found.get(name, 0)) for name in names)
        except Exception:
            return None
