"""An in-memory SQS (standard queues) with the semantics the stack relies on, for the local stack.

Why not moto's SQS: it answers every ``ReceiveMessage`` by walking the whole queue several times per returned
message (its retention check recomputes every queue attribute), so a drain of N messages costs O(N²) and the
gateway process that hosts it became the local stack's bottleneck (``docs/performance.md``). Here a receive
costs what it returns: visible messages wait in a deque, in-flight and delayed ones in a heap keyed by the
moment they become visible.

Semantics kept from SQS (``tests/unit/test_local_sqs.py``): a received message is invisible for the visibility
timeout (the queue's or the receive's) and comes back after it with a new receipt handle and
``ApproximateReceiveCount`` + 1; only the latest receipt handle deletes (an older one succeeds and deletes
nothing, as documented); a redrive policy moves a message to its dead-letter queue on the receive after
``maxReceiveCount`` receptions; ``DelaySeconds``, retention, long polling (``WaitTimeSeconds``), batch rules
(1..10 entries, distinct ids, total size) and the message size limit (``MaximumMessageSize``) are enforced
with SQS's error codes. Not modelled: FIFO queues, permissions, tags, encryption.

:class:`LocalSqsClient` offers the boto3 client's method names on top of the model, so the local SQS event
source (``delivery.py``) polls without HTTP; handlers reach the same model over HTTP (``sqs_server.py``).
"""

from __future__ import annotations

import hashlib
import heapq
import json
import re
import struct
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ACCOUNT", "LocalSqs", "LocalSqsClient", "SqsError", "md5_of_attributes"]

ACCOUNT = "123456789012"
DEFAULT_MAX_MESSAGE_SIZE = 262_144  # SQS's historic default (moto's too); a queue may set MaximumMessageSize
_DEFAULTS = {
    "VisibilityTimeout": 30,
    "MessageRetentionPeriod": 345_600,
    "DelaySeconds": 0,
    "ReceiveMessageWaitTimeSeconds": 0,
    "MaximumMessageSize": DEFAULT_MAX_MESSAGE_SIZE,
}
_RANGES = {
    "VisibilityTimeout": (0, 43_200),
    "MessageRetentionPeriod": (60, 1_209_600),
    "DelaySeconds": (0, 900),
    "ReceiveMessageWaitTimeSeconds": (0, 20),
    "MaximumMessageSize": (1_024, 1_048_576),
}
_BATCH_ID = re.compile(r"^[A-Za-z0-9_-]{1,80}$")
# XML 1.0 characters: what SQS accepts in a body
_INVALID_BODY = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


class SqsError(Exception):
    """An SQS error: ``code`` is the JSON protocol's short name, ``query_code`` the legacy one."""

    def __init__(self, code: str, message: str, *, sender: bool = True, query_code: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.sender = sender
        self.query_code = query_code or code


def _invalid(message: str) -> SqsError:
    return SqsError("InvalidParameterValue", message)


def _md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def md5_of_attributes(attributes: Mapping[str, Mapping[str, Any]]) -> str:
    """SQS's ``MD5OfMessageAttributes``: length-prefixed name, type and value of each attribute, by name."""
    buffer = bytearray()
    for name in sorted(attributes):
        attr = attributes[name]
        data_type = str(attr.get("DataType", "String"))
        for part in (name.encode(), data_type.encode()):
            buffer += struct.pack("!I", len(part)) + part
        if "StringValue" in attr:
            value = str(attr["StringValue"]).encode()
            buffer += b"\x01" + struct.pack("!I", len(value)) + value
        else:
            binary = attr.get("BinaryValue", b"")
            value = binary if isinstance(binary, bytes) else str(binary).encode()
            buffer += b"\x02" + struct.pack("!I", len(value)) + value
    return _md5(bytes(buffer))


def _attributes_size(attributes: Mapping[str, Mapping[str, Any]]) -> int:
    size = 0
    for name, attr in attributes.items():
        size += len(name.encode()) + len(str(attr.get("DataType", "")).encode())
        value = attr.get("StringValue", attr.get("BinaryValue", b""))
        size += len(value) if isinstance(value, bytes) else len(str(value).encode())
    return size


@dataclass
class _Message:
    message_id: str
    body: str
    attributes: dict[str, dict[str, Any]]
    sent_at: float  # epoch seconds (SentTimestamp)
    visible_at: float  # the model's clock
    expires_at: float  # the model's clock (MessageRetentionPeriod)
    enqueued_at: float = 0.0  # the model's clock (retention counts from the first enqueue, also in a DLQ)
    receive_count: int = 0
    first_receive_ms: int | None = None
    receipt: str | None = None  # the latest receipt handle: only it deletes
    version: int = 0  # bumps whenever visible_at changes, so stale heap entries are skipped


@dataclass
class _Queue:
    name: str
    url: str
    arn: str
    attributes: dict[str, str]
    created: float
    messages: dict[str, _Message] = field(default_factory=dict)
    ready: deque[str] = field(default_factory=deque)
    hidden: list[tuple[float, int, str, int]] = field(default_factory=list)  # (visible_at, seq, id, version)

    def number(self, key: str) -> int:
        return int(self.attributes.get(key, _DEFAULTS[key]))

    def redrive(self) -> tuple[str, int] | None:
        policy = self.attributes.get("RedrivePolicy")
        if not policy:
            return None
        parsed = json.loads(policy)
        return str(parsed["deadLetterTargetArn"]), int(parsed["maxReceiveCount"])


def _check_attributes(attributes: Mapping[str, Any]) -> dict[str, str]:
    checked: dict[str, str] = {}
    for key, value in attributes.items():
        if key in _RANGES:
            low, high = _RANGES[key]
            try:
                number = int(str(value))
            except ValueError:
                raise _invalid(f"Invalid value for the parameter {key}.") from None
            if not low <= number <= high:
                raise _invalid(f"Invalid value for the parameter {key}.")
            checked[key] = str(number)
        elif key == "RedrivePolicy":
            try:
                policy = json.loads(str(value))
                int(policy["maxReceiveCount"])
                str(policy["deadLetterTargetArn"])
            except (ValueError, KeyError, TypeError):
                raise _invalid("Invalid value for the parameter RedrivePolicy.") from None
            checked[key] = str(value)
        else:
            checked[key] = str(value)
    return checked


class LocalSqs:
    """Every queue of one local stack, thread-safe (one lock; long polls wait on its condition).

    ``now`` is the clock visibility, delay and retention follow (``time.monotonic`` by default; tests move a
    fake one). ``endpoint`` is the base of the queue URLs (the HTTP server's address).
    """

    def __init__(
        self, endpoint: str = "http://127.0.0.1", *, region: str = "us-east-1", now: Callable[[], float] | None = None
    ) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.region = region
        self.now = now or time.monotonic
        self._queues: dict[str, _Queue] = {}
        self._changed = threading.Condition()
        self._seq = 0

    # ------------------------------------------------------------------ queues

    def create_queue(self, name: str, attributes: Mapping[str, Any] | None = None) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,80}", name or ""):
            raise _invalid("Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length")
        checked = _check_attributes(attributes or {})
        with self._changed:
            queue = self._queues.get(name)
            if queue is not None:
                if any(queue.attributes.get(k, str(_DEFAULTS.get(k, ""))) != v for k, v in checked.items()):
                    raise SqsError(
                        "QueueNameExists",
                        "A queue already exists with the same name and a different value for attribute(s)",
                        query_code="QueueAlreadyExists",
                    )
                return queue.url
            url = f"{self.endpoint}/{ACCOUNT}/{name}"
            arn = f"arn:aws:sqs:{self.region}:{ACCOUNT}:{name}"
            self._queues[name] = _Queue(name, url, arn, checked, time.time())
            return url

    def queue_url(self, name: str) -> str:
        with self._changed:
            queue = self._queues.get(name)
            if queue is None:
                raise self._no_queue()
            return queue.url

    def list_queues(self, prefix: str = "") -> list[str]:
        with self._changed:
            return [q.url for name, q in sorted(self._queues.items()) if name.startswith(prefix)]

    def delete_queue(self, url: str) -> None:
        with self._changed:
            self._queues.pop(self._queue(url).name, None)

    def purge_queue(self, url: str) -> None:
        with self._changed:
            queue = self._queue(url)
            queue.messages.clear()
            queue.ready.clear()
            queue.hidden.clear()

    def set_queue_attributes(self, url: str, attributes: Mapping[str, Any]) -> None:
        with self._changed:
            self._queue(url).attributes.update(_check_attributes(attributes))

    def get_queue_attributes(self, url: str, names: Iterable[str] = ("All",)) -> dict[str, str]:
        with self._changed:
            queue = self._queue(url)
            self._promote(queue)
            wanted = set(names)
            everything = {**{k: str(v) for k, v in _DEFAULTS.items()}, **queue.attributes}
            everything.update(self._counts(queue))
            everything["QueueArn"] = queue.arn
            everything["CreatedTimestamp"] = everything["LastModifiedTimestamp"] = str(int(queue.created))
            if "All" in wanted:
                return everything
            return {key: value for key, value in everything.items() if key in wanted}

    def _counts(self, queue: _Queue) -> dict[str, str]:
        now = self.now()
        visible = delayed = in_flight = 0
        for message in queue.messages.values():
            if message.visible_at <= now:
                visible += 1
            elif message.receive_count == 0:
                delayed += 1
            else:
                in_flight += 1
        return {
            "ApproximateNumberOfMessages": str(visible),
            "ApproximateNumberOfMessagesNotVisible": str(in_flight),
            "ApproximateNumberOfMessagesDelayed": str(delayed),
        }

    def _no_queue(self) -> SqsError:
        return SqsError(
            "QueueDoesNotExist",
            "The specified queue does not exist.",
            query_code="AWS.SimpleQueueService.NonExistentQueue",
        )

    def _queue(self, url: str) -> _Queue:
        name = str(url or "").rstrip("/").rsplit("/", 1)[-1]
        queue = self._queues.get(name)
        if queue is None:
            raise self._no_queue()
        return queue

    def _by_arn(self, arn: str) -> _Queue | None:
        return next((q for q in self._queues.values() if q.arn == arn), None)

    # ------------------------------------------------------------------ sending

    def send(
        self, url: str, body: str | None, attributes: Mapping[str, Any] | None = None, delay: int | None = None
    ) -> dict[str, str]:
        """One message (``SendMessage``); returns ``MessageId`` and the MD5s."""
        return self.send_batch(
            url,
            [
                {
                    "Id": "0",
                    "MessageBody": body,
                    "MessageAttributes": attributes or {},
                    **({} if delay is None else {"DelaySeconds": delay}),
                }
            ],
            single=True,
        )["Successful"][0]

    def send_batch(
        self, url: str, entries: Sequence[Mapping[str, Any]], *, single: bool = False
    ) -> dict[str, list[dict[str, Any]]]:
        """``SendMessageBatch``: per-entry failures for bad entries, errors for a bad batch."""
        with self._changed:
            queue = self._queue(url)
            _check_batch(entries, None if single else queue.number("MaximumMessageSize"))
            successful: list[dict[str, Any]] = []
            failed: list[dict[str, Any]] = []
            for entry in entries:
                try:
                    successful.append(self._enqueue(queue, entry))
                except SqsError as exc:
                    if single:
                        raise
                    failed.append(
                        {"Id": entry["Id"], "SenderFault": exc.sender, "Code": exc.code, "Message": exc.message}
                    )
            self._changed.notify_all()
            return {"Successful": successful, "Failed": failed}

    def _enqueue(self, queue: _Queue, entry: Mapping[str, Any]) -> dict[str, Any]:
        body = entry.get("MessageBody")
        if not isinstance(body, str) or body == "":
            raise SqsError("MissingParameter", "The request must contain the parameter MessageBody.")
        if _INVALID_BODY.search(body):
            raise SqsError("InvalidMessageContents", "Invalid characters found in the message body.")
        attributes = {str(k): dict(v) for k, v in (entry.get("MessageAttributes") or {}).items()}
        limit = queue.number("MaximumMessageSize")
        if len(body.encode()) + _attributes_size(attributes) > limit:
            raise _invalid(f"One or more parameters are invalid. Reason: Message must be shorter than {limit} bytes.")
        delay = entry.get("DelaySeconds")
        delay = queue.number("DelaySeconds") if delay is None else int(delay)
        if not 0 <= delay <= 900:
            raise _invalid("Value for parameter DelaySeconds is invalid. Reason: must be between 0 and 900.")
        now = self.now()
        message = _Message(
            message_id=str(uuid.uuid4()),
            body=body,
            attributes=attributes,
            sent_at=time.time(),
            visible_at=now + delay,
            expires_at=now + queue.number("MessageRetentionPeriod"),
            enqueued_at=now,
        )
        queue.messages[message.message_id] = message
        if delay:
            self._hide(queue, message)
        else:
            queue.ready.append(message.message_id)
        result = {"Id": entry.get("Id"), "MessageId": message.message_id, "MD5OfMessageBody": _md5(body.encode())}
        if attributes:
            result["MD5OfMessageAttributes"] = md5_of_attributes(attributes)
        return result

    def _hide(self, queue: _Queue, message: _Message) -> None:
        message.version += 1
        self._seq += 1
        heapq.heappush(queue.hidden, (message.visible_at, self._seq, message.message_id, message.version))

    def _promote(self, queue: _Queue) -> None:
        """Messages whose visibility timeout or delay ran out become receivable again."""
        now = self.now()
        while queue.hidden and queue.hidden[0][0] <= now:
            _, _, message_id, version = heapq.heappop(queue.hidden)
            message = queue.messages.get(message_id)
            if message is not None and message.version == version:
                queue.ready.append(message_id)

    # ------------------------------------------------------------------ receiving

    def receive(
        self,
        url: str,
        *,
        max_messages: int = 1,
        visibility_timeout: int | None = None,
        wait_seconds: int | None = None,
    ) -> list[dict[str, Any]]:
        """``ReceiveMessage``: up to ``max_messages`` (1..10) visible messages, waiting up to ``wait_seconds``."""
        if not 1 <= max_messages <= 10:
            raise SqsError(
                "ReadCountOutOfRange",
                "Value for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and 10.",
            )
        if visibility_timeout is not None and not 0 <= visibility_timeout <= 43_200:
            raise _invalid("Value for parameter VisibilityTimeout is invalid.")
        with self._changed:
            queue = self._queue(url)
            wait = queue.number("ReceiveMessageWaitTimeSeconds") if wait_seconds is None else wait_seconds
            if not 0 <= wait <= 20:
                raise _invalid("Value for parameter WaitTimeSeconds is invalid. Reason: Must be >= 0 and <= 20.")
            deadline = time.monotonic() + wait
            while True:
                received = self._take(queue, max_messages, visibility_timeout)
                remaining = deadline - time.monotonic()
                if received or remaining <= 0:
                    return received
                self._changed.wait(min(remaining, 0.05))  # also wakes for messages whose timeout runs out
                queue = self._queue(url)

    def _take(self, queue: _Queue, count: int, visibility_timeout: int | None) -> list[dict[str, Any]]:
        self._promote(queue)
        now = self.now()
        timeout = queue.number("VisibilityTimeout") if visibility_timeout is None else visibility_timeout
        redrive = queue.redrive()
        taken: list[dict[str, Any]] = []
        while queue.ready and len(taken) < count:
            message = queue.messages.get(queue.ready.popleft())
            if message is None or message.visible_at > now:
                continue  # deleted, or hidden again since it was promoted (a stale entry)
            if message.expires_at <= now:
                del queue.messages[message.message_id]
                continue
            if (
                redrive is not None
                and message.receive_count >= redrive[1]
                and self._dead_letter(queue, message, redrive[0])
            ):
                continue
            message.receive_count += 1
            if message.first_receive_ms is None:
                message.first_receive_ms = int(time.time() * 1000)
            message.receipt = f"{queue.name}:{message.message_id}:{uuid.uuid4().hex}"
            message.visible_at = now + timeout
            self._hide(queue, message)
            taken.append(self._view(message))
        return taken

    def _dead_letter(self, queue: _Queue, message: _Message, target_arn: str) -> bool:
        """Move a message received ``maxReceiveCount`` times to the dead-letter queue (False if that is gone)."""
        target = self._by_arn(target_arn)
        if target is None:
            return False
        del queue.messages[message.message_id]
        message.visible_at = self.now()
        message.receipt = None
        message.version += 1
        message.expires_at = message.enqueued_at + target.number("MessageRetentionPeriod")
        target.messages[message.message_id] = message
        target.ready.append(message.message_id)
        return True

    def _view(self, message: _Message) -> dict[str, Any]:
        view: dict[str, Any] = {
            "MessageId": message.message_id,
            "ReceiptHandle": message.receipt,
            "MD5OfBody": _md5(message.body.encode()),
            "Body": message.body,
            "Attributes": {
                "SenderId": ACCOUNT,
                "SentTimestamp": str(int(message.sent_at * 1000)),
                "ApproximateReceiveCount": str(message.receive_count),
                "ApproximateFirstReceiveTimestamp": str(message.first_receive_ms),
            },
        }
        if message.attributes:
            view["MessageAttributes"] = {name: dict(attr) for name, attr in message.attributes.items()}
            view["MD5OfMessageAttributes"] = md5_of_attributes(message.attributes)
        return view

    # ------------------------------------------------------------------ deleting, visibility

    def _by_receipt(self, queue: _Queue, receipt: str) -> _Message | None:
        parts = str(receipt or "").split(":")
        if len(parts) != 3 or parts[0] != queue.name:
            raise SqsError(
                "ReceiptHandleIsInvalid", f'The input receipt handle "{receipt}" is not a valid receipt handle.'
            )
        message = queue.messages.get(parts[1])
        return message if message is not None and message.receipt == receipt else None

    def delete(self, url: str, receipt: str) -> None:
        """``DeleteMessage``: only the latest receipt handle deletes; an older one succeeds and changes nothing."""
        with self._changed:
            queue = self._queue(url)
            message = self._by_receipt(queue, receipt)
            if message is not None:
                del queue.messages[message.message_id]

    def change_visibility(self, url: str, receipt: str, timeout: int) -> None:
        """``ChangeMessageVisibility`` of a message in flight, counted from now."""
        if not 0 <= timeout <= 43_200:
            raise _invalid("Value for parameter VisibilityTimeout is invalid.")
        with self._changed:
            queue = self._queue(url)
            message = self._by_receipt(queue, receipt)
            if message is None or message.visible_at <= self.now():
                raise SqsError(
                    "MessageNotInflight", "Message does not exist or is not available for visibility timeout change."
                )
            message.visible_at = self.now() + timeout
            self._hide(queue, message)
            self._changed.notify_all()

    def batch(
        self, url: str, entries: Sequence[Mapping[str, Any]], apply: Callable[[Mapping[str, Any]], None]
    ) -> dict[str, list[dict[str, Any]]]:
        """A ``*Batch`` call of deletes or visibility changes: per-entry results."""
        _check_batch(entries, None)
        self._queue_checked(url)
        successful: list[dict[str, Any]] = []
        failed: list[dict[str, Any]] = []
        for entry in entries:
            try:
                apply(entry)
            except SqsError as exc:
                failed.append({"Id": entry["Id"], "SenderFault": exc.sender, "Code": exc.code, "Message": exc.message})
            else:
                successful.append({"Id": entry["Id"]})
        return {"Successful": successful, "Failed": failed}

    def _queue_checked(self, url: str) -> None:
        with self._changed:
            self._queue(url)


def _check_batch(entries: Sequence[Mapping[str, Any]], size_limit: int | None) -> None:
    if not entries:
        raise SqsError(
            "EmptyBatchRequest",
            "There should be at least one entry in the request.",
            query_code="AWS.SimpleQueueService.EmptyBatchRequest",
        )
    if len(entries) > 10:
        raise SqsError(
            "TooManyEntriesInBatchRequest",
            f"Maximum number of entries per request are 10. You have sent {len(entries)}.",
            query_code="AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
        )
    ids = [str(entry.get("Id", "")) for entry in entries]
    if any(not _BATCH_ID.match(i) for i in ids):
        raise SqsError(
            "InvalidBatchEntryId",
            "A batch entry id can only contain alphanumeric characters, hyphens and underscores. "
            "It can be at most 80 letters long.",
            query_code="AWS.SimpleQueueService.InvalidBatchEntryId",
        )
    if len(set(ids)) != len(ids):
        raise SqsError(
            "BatchEntryIdsNotDistinct",
            "Two or more batch entries in the request have the same Id.",
            query_code="AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
        )
    if size_limit is not None:
        total = sum(
            len(str(e.get("MessageBody", "")).encode()) + _attributes_size(e.get("MessageAttributes") or {})
            for e in entries
        )
        if total > size_limit:
            raise SqsError(
                "BatchRequestTooLong",
                f"Batch requests cannot be longer than {size_limit} bytes. You have sent {total} bytes.",
                query_code="AWS.SimpleQueueService.BatchRequestTooLong",
            )


class LocalSqsClient:
    """The boto3 SQS client's calls the local stack makes, answered by a :class:`LocalSqs` without HTTP.

    Same parameter names and response shapes as boto3 (``BinaryValue`` as bytes); errors are :class:`SqsError`.
    """

    def __init__(self, sqs: LocalSqs) -> None:
        self.sqs = sqs

    def create_queue(self, *, QueueName: str, Attributes: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return {"QueueUrl": self.sqs.create_queue(QueueName, Attributes)}

    def get_queue_attributes(self, *, QueueUrl: str, AttributeNames: list[str] | None = None) -> dict[str, Any]:
        return {"Attributes": self.sqs.get_queue_attributes(QueueUrl, AttributeNames or ["All"])}

    def send_message_batch(self, *, QueueUrl: str, Entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return self.sqs.send_batch(QueueUrl, Entries)

    def receive_message(
        self,
        *,
        QueueUrl: str,
        MaxNumberOfMessages: int = 1,
        VisibilityTimeout: int | None = None,
        WaitTimeSeconds: int | None = None,
        **_names: Any,  # AttributeNames and friends: every attribute is returned
    ) -> dict[str, Any]:
        messages = self.sqs.receive(
            QueueUrl,
            max_messages=MaxNumberOfMessages,
            visibility_timeout=VisibilityTimeout,
            wait_seconds=WaitTimeSeconds,
        )
        return {"Messages": messages} if messages else {}

    def delete_message(self, *, QueueUrl: str, ReceiptHandle: str) -> dict[str, Any]:
        self.sqs.delete(QueueUrl, ReceiptHandle)
        return {}

    def delete_message_batch(self, *, QueueUrl: str, Entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return self.sqs.batch(
            QueueUrl, Entries, lambda entry: self.sqs.delete(QueueUrl, str(entry.get("ReceiptHandle")))
        )
