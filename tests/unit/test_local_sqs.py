"""The local stack's in-memory SQS (tools/amsg_local/sqs_model.py, sqs_server.py) keeps SQS's semantics:
visibility timeout and redelivery, latest-receipt-only deletes, the dead-letter queue after maxReceiveCount,
delays, retention, long polling, batch and size limits with SQS's error codes; the local event source drains
it with Lambda's partial-batch rules; boto3 talks to it over HTTP as to SQS."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import Counter
from typing import Any

import boto3
import pytest
from amsg_local.delivery import LocalDelivery
from amsg_local.invocation import Invocation
from amsg_local.sqs_model import LocalSqs, LocalSqsClient, SqsError, md5_of_attributes
from amsg_local.sqs_server import SqsServer
from amsg_local.tables import LocalQueue
from botocore.exceptions import ClientError
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import examples


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def make(
    vt: int = 30, max_receive: int | None = None, **attributes: Any
) -> tuple[LocalSqs, FakeClock, str, str | None]:
    clock = FakeClock()
    sqs = LocalSqs("http://127.0.0.1:1", now=clock)
    dlq = None
    attrs: dict[str, Any] = {"VisibilityTimeout": vt, **attributes}
    if max_receive is not None:
        dlq = sqs.create_queue("q-dlq")
        arn = sqs.get_queue_attributes(dlq, ["QueueArn"])["QueueArn"]
        attrs["RedrivePolicy"] = json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": max_receive})
    return sqs, clock, sqs.create_queue("q", attrs), dlq


def counts(sqs: LocalSqs, url: str) -> tuple[int, int, int]:
    a = sqs.get_queue_attributes(url)
    return (
        int(a["ApproximateNumberOfMessages"]),
        int(a["ApproximateNumberOfMessagesNotVisible"]),
        int(a["ApproximateNumberOfMessagesDelayed"]),
    )


def test_a_received_message_is_invisible_until_its_visibility_timeout_then_comes_back() -> None:
    sqs, clock, q, _ = make(vt=30)
    sqs.send(q, "a")
    (first,) = sqs.receive(q, max_messages=10)
    assert first["Body"] == "a" and first["Attributes"]["ApproximateReceiveCount"] == "1"
    assert sqs.receive(q, max_messages=10) == []
    assert counts(sqs, q) == (0, 1, 0)
    clock.t += 29.9
    assert sqs.receive(q) == []
    clock.t += 0.2
    (again,) = sqs.receive(q)
    assert again["MessageId"] == first["MessageId"]
    assert again["ReceiptHandle"] != first["ReceiptHandle"]
    assert again["Attributes"]["ApproximateReceiveCount"] == "2"
    assert (
        again["Attributes"]["ApproximateFirstReceiveTimestamp"]
        == first["Attributes"]["ApproximateFirstReceiveTimestamp"]
    )


def test_only_the_latest_receipt_handle_deletes() -> None:
    sqs, clock, q, _ = make(vt=5)
    sqs.send(q, "a")
    (first,) = sqs.receive(q)
    clock.t += 6
    (second,) = sqs.receive(q)
    sqs.delete(q, first["ReceiptHandle"])  # succeeds, deletes nothing (SQS's documented behaviour)
    assert counts(sqs, q) == (0, 1, 0)
    sqs.delete(q, second["ReceiptHandle"])
    assert counts(sqs, q) == (0, 0, 0)
    clock.t += 60
    assert sqs.receive(q) == []
    sqs.delete(q, second["ReceiptHandle"])  # deleting twice is fine
    with pytest.raises(SqsError) as bad:
        sqs.delete(q, "garbage")
    assert bad.value.code == "ReceiptHandleIsInvalid"


def test_a_message_goes_to_the_dead_letter_queue_on_the_receive_after_max_receive_count() -> None:
    sqs, clock, q, dlq = make(vt=10, max_receive=3)
    assert dlq is not None
    sqs.send(q, "poison")
    for attempt in range(1, 4):
        (message,) = sqs.receive(q)
        assert message["Attributes"]["ApproximateReceiveCount"] == str(attempt)
        clock.t += 11  # the batch failed: the record comes back after the visibility timeout
    assert sqs.receive(q, max_messages=10) == []  # the 4th receive moves it instead of returning it
    assert counts(sqs, q) == (0, 0, 0)
    (dead,) = sqs.receive(dlq)
    assert dead["Body"] == "poison" and dead["MessageId"] == message["MessageId"]


def test_change_visibility_and_receive_override() -> None:
    sqs, clock, q, _ = make(vt=600)
    sqs.send(q, "a")
    (m,) = sqs.receive(q, visibility_timeout=2)
    clock.t += 2
    (m,) = sqs.receive(q)
    sqs.change_visibility(q, m["ReceiptHandle"], 0)
    (m,) = sqs.receive(q)
    assert m["Attributes"]["ApproximateReceiveCount"] == "3"
    clock.t += 601
    with pytest.raises(SqsError) as stale:
        sqs.change_visibility(q, m["ReceiptHandle"], 10)
    assert stale.value.code == "MessageNotInflight"


def test_delay_and_retention() -> None:
    sqs, clock, q, _ = make(MessageRetentionPeriod=60)
    sqs.send_batch(q, [{"Id": "d", "MessageBody": "later", "DelaySeconds": 10}, {"Id": "n", "MessageBody": "now"}])
    assert counts(sqs, q) == (1, 0, 1)
    assert [m["Body"] for m in sqs.receive(q, max_messages=10)] == ["now"]
    clock.t += 10
    assert [m["Body"] for m in sqs.receive(q, max_messages=10)] == ["later"]
    sqs.send(q, "old")
    clock.t += 61
    assert sqs.receive(q, max_messages=10) == []  # past MessageRetentionPeriod: gone, in flight or not
    assert counts(sqs, q)[0] == 0


def test_batch_and_size_limits_use_sqs_error_codes() -> None:
    sqs, _, q, _ = make(MaximumMessageSize=1024)
    for entries, code in (
        ([], "EmptyBatchRequest"),
        ([{"Id": str(i), "MessageBody": "x"} for i in range(11)], "TooManyEntriesInBatchRequest"),
        ([{"Id": "a", "MessageBody": "x"}, {"Id": "a", "MessageBody": "y"}], "BatchEntryIdsNotDistinct"),
        ([{"Id": "no spaces", "MessageBody": "x"}], "InvalidBatchEntryId"),
        ([{"Id": "a", "MessageBody": "x" * 600}, {"Id": "b", "MessageBody": "y" * 600}], "BatchRequestTooLong"),
    ):
        with pytest.raises(SqsError) as error:
            sqs.send_batch(q, entries)
        assert error.value.code == code
    with pytest.raises(SqsError) as error:
        sqs.send(q, "x" * 1025)
    assert error.value.code == "InvalidParameterValue"
    sqs.send(q, "x" * 1024)  # exactly the limit is fine
    result = sqs.send_batch(q, [{"Id": "ok", "MessageBody": "fine"}, {"Id": "bad", "MessageBody": "nul\x00"}])
    assert [s["Id"] for s in result["Successful"]] == ["ok"]
    assert [(f["Id"], f["Code"]) for f in result["Failed"]] == [("bad", "InvalidMessageContents")]
    with pytest.raises(SqsError) as error:
        sqs.receive(q, max_messages=11)
    assert error.value.code == "ReadCountOutOfRange"
    with pytest.raises(SqsError) as error:
        sqs.send(sqs.endpoint + "/123456789012/nope", "x")
    assert error.value.code == "QueueDoesNotExist"


def test_long_polling_returns_as_soon_as_a_message_arrives() -> None:
    sqs = LocalSqs()
    q = sqs.create_queue("q")
    threading.Timer(0.2, lambda: sqs.send(q, "late")).start()
    began = time.monotonic()
    (message,) = sqs.receive(q, wait_seconds=5)
    assert message["Body"] == "late" and time.monotonic() - began < 3
    began = time.monotonic()
    assert sqs.receive(q, wait_seconds=1) == []
    assert time.monotonic() - began >= 0.9


def test_concurrent_receivers_never_share_a_message() -> None:
    sqs = LocalSqs()
    q = sqs.create_queue("q", {"VisibilityTimeout": 600})
    for start in range(0, 1000, 10):
        sqs.send_batch(q, [{"Id": str(i), "MessageBody": str(start + i)} for i in range(10)])
    seen: Counter[str] = Counter()
    lock = threading.Lock()

    def poll() -> None:
        while batch := sqs.receive(q, max_messages=5):
            with lock:
                seen.update(m["Body"] for m in batch)

    threads = [threading.Thread(target=poll) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 1000 and set(seen.values()) == {1}


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.integers(0, 2)),
        st.tuples(st.just("receive"), st.integers(1, 10)),
        st.tuples(st.just("delete"), st.integers(0, 50)),
        st.tuples(st.just("advance"), st.integers(0, 40)),
    ),
    max_size=60,
)


@settings(max_examples=examples(60), deadline=None)
@given(ops=OPS)
def test_no_message_is_lost_or_handed_out_twice_while_in_flight(ops: list[tuple[str, int]]) -> None:
    sqs, clock, q, dlq = make(vt=20, max_receive=4)
    assert dlq is not None
    sent: set[str] = set()
    deleted: set[str] = set()
    in_flight: dict[str, tuple[float, str]] = {}  # id -> (visible again at, latest receipt)
    handles: list[tuple[str, str]] = []
    for op, arg in ops:
        if op == "send":
            for _ in range(arg + 1):
                sent.add(sqs.send(q, f"m{len(sent)}")["MessageId"])
        elif op == "receive":
            for message in sqs.receive(q, max_messages=arg):
                mid = message["MessageId"]
                assert mid not in deleted
                assert mid not in in_flight or in_flight[mid][0] <= clock.t  # never twice within the timeout
                in_flight[mid] = (clock.t + 20, message["ReceiptHandle"])
                handles.append((mid, message["ReceiptHandle"]))
        elif op == "delete" and handles:
            mid, receipt = handles[arg % len(handles)]
            sqs.delete(q, receipt)
            if mid in in_flight and in_flight[mid][1] == receipt and mid not in deleted:
                deleted.add(mid)
        else:
            clock.t += arg
    clock.t += 10_000  # everything in flight comes back; what was received too often is dead-lettered
    left = []
    while batch := sqs.receive(q, max_messages=10):
        left += [m["MessageId"] for m in batch]
    dead = []
    while batch := sqs.receive(dlq, max_messages=10):
        dead += [m["MessageId"] for m in batch]
    assert sorted(left + dead) == sorted(sent - deleted)  # nothing lost, nothing twice, deletes honoured


class FakeRuntime:
    """Stands in for the Lambda runtime: the consumer fails the records whose body starts with 'fail'."""

    def __init__(self, mode: str = "partial") -> None:
        self.mode = mode
        self.batches: list[list[str]] = []

    def handler_file(self, logical_id: str) -> Any:
        return type("P", (), {"is_file": lambda self: False})()

    def invoke(self, logical_id: str, event: dict[str, Any]) -> Invocation:
        records = event["Records"]
        self.batches.append([r["body"] for r in records])
        if self.mode == "raise":
            return Invocation(logical_id, "r", 1.0, None, "Boom", "boom")
        failures = [{"itemIdentifier": r["messageId"]} for r in records if r["body"].startswith("fail")]
        return Invocation(logical_id, "r", 1.0, {"batchItemFailures": failures})


TEMPLATE = {
    "Resources": {
        "Tick": {"Type": "AWS::Serverless::Function", "Properties": {"Events": {"T": {"Type": "ScheduleV2"}}}},
        "Consumer": {
            "Type": "AWS::Serverless::Function",
            "Properties": {
                "Events": {
                    "Q": {
                        "Type": "SQS",
                        "Properties": {
                            "Queue": "Tasks.Arn",
                            "BatchSize": 5,
                            "ScalingConfig": {"MaximumConcurrency": 3},
                        },
                    }
                }
            },
        },
    }
}


@pytest.mark.parametrize("mode", ["partial", "raise"])
def test_the_event_source_deletes_only_records_not_reported_as_failed(mode: str) -> None:
    sqs, clock, q, _ = make(vt=720)
    queue = LocalQueue(url=q, arn=sqs.get_queue_attributes(q)["QueueArn"], dead_letter_url=None, batch_size=5)
    runtime = FakeRuntime(mode)
    delivery = LocalDelivery(TEMPLATE, runtime, LocalSqsClient(sqs), queue)  # type: ignore[arg-type]
    assert delivery.concurrency == 3
    bodies = [f"{'fail' if i % 4 == 0 else 'ok'}-{i}" for i in range(23)]
    for start in range(0, 23, 10):
        sqs.send_batch(q, [{"Id": str(i), "MessageBody": b} for i, b in enumerate(bodies[start : start + 10])])
    summary = delivery.drain()
    assert all(len(batch) <= 5 for batch in runtime.batches)
    assert sorted(b for batch in runtime.batches for b in batch) == sorted(bodies)  # each record once per drain
    failed = 23 if mode == "raise" else sum(b.startswith("fail") for b in bodies)
    assert (summary["received"], summary["deleted"], summary["failed"]) == (23, 23 - failed, failed)
    assert counts(sqs, q) == (0, failed, 0)  # the failed ones wait out the visibility timeout
    clock.t += 721
    assert delivery.drain()["received"] == failed


def test_boto3_talks_to_the_endpoint_as_to_sqs() -> None:
    with SqsServer() as server:
        client = boto3.client(
            "sqs",
            region_name="us-east-1",
            endpoint_url=server.endpoint_url,
            aws_access_key_id="local",
            aws_secret_access_key="local",
        )
        url = client.create_queue(QueueName="tasks", Attributes={"VisibilityTimeout": "720"})["QueueUrl"]
        assert client.get_queue_url(QueueName="tasks")["QueueUrl"] == url
        attrs: dict[str, dict[str, Any]] = {
            "kind": {"DataType": "Binary", "BinaryValue": b"\x00\x01"},
            "n": {"DataType": "Number", "StringValue": "7"},
        }
        sent = client.send_message_batch(
            QueueUrl=url, Entries=[{"Id": "a", "MessageBody": '{"uuid":"1"}', "MessageAttributes": attrs}]
        )
        assert sent["Successful"][0]["MD5OfMessageBody"] == hashlib.md5(b'{"uuid":"1"}').hexdigest()
        assert sent["Successful"][0]["MD5OfMessageAttributes"] == md5_of_attributes(attrs)
        (message,) = client.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"], MessageAttributeNames=["All"]
        )["Messages"]
        assert message["Body"] == '{"uuid":"1"}'
        assert message["MessageAttributes"]["kind"]["BinaryValue"] == b"\x00\x01"
        assert message["Attributes"]["ApproximateReceiveCount"] == "1"
        deleted = client.delete_message_batch(
            QueueUrl=url, Entries=[{"Id": "x", "ReceiptHandle": message["ReceiptHandle"]}]
        )
        assert [s["Id"] for s in deleted["Successful"]] == ["x"]
        with pytest.raises(client.exceptions.QueueDoesNotExist):
            client.get_queue_attributes(QueueUrl=server.endpoint_url + "/123456789012/missing")
        with pytest.raises(ClientError) as too_many:
            client.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": "x"} for i in range(11)])
        assert too_many.value.response["Error"]["Code"] == "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"
        # the same model answers in process (what the local event source uses)
        assert server.sqs.get_queue_attributes(url, ["ApproximateNumberOfMessages"]) == {
            "ApproximateNumberOfMessages": "0"
        }


def test_the_event_source_polls_while_the_tick_is_still_enqueuing() -> None:
    sqs, _, q, _ = make(vt=720)
    queue = LocalQueue(url=q, arn=sqs.get_queue_attributes(q)["QueueArn"], dead_letter_url=None, batch_size=5)
    runtime = FakeRuntime()
    delivery = LocalDelivery(TEMPLATE, runtime, LocalSqsClient(sqs), queue)  # type: ignore[arg-type]
    done = threading.Event()

    def tick() -> None:  # enqueues in three bursts, like a tick claiming page after page
        for burst in range(3):
            time.sleep(0.2)
            sqs.send_batch(q, [{"Id": str(i), "MessageBody": f"ok-{burst}-{i}"} for i in range(10)])
        done.set()

    producer = threading.Thread(target=tick)
    producer.start()
    summary = delivery.drain(producer_done=done)
    producer.join()
    assert (summary["received"], summary["deleted"], summary["failed"]) == (30, 30, 0)
    assert len(runtime.batches) >= 6 and counts(sqs, q) == (0, 0, 0)
