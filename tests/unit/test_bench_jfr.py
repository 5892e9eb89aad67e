"""``bench capacity``'s JFR reading (bench/jfr.py): each sampled stack goes to the first listed part one of its
frames names, whatever else the stack holds."""

from __future__ import annotations

from typing import Any

from bench.jfr import _epoch_s, count_parts

PARSE = "the table's description parsed (getTableInfo, getTableSchemaInfo2)"
TRANSACTION = "transactions: expressions, checks, the idempotency signature"
HTTP = "requests and answers as JSON, HTTP"


def _sample(*frames: str) -> dict[str, Any]:
    """A ``jdk.ExecutionSample`` as ``jfr print --json`` prints it: frames leaf first, types with slashes."""
    methods = []
    for frame in frames:
        owner, _, method = frame.rpartition(".")
        methods.append({"method": {"type": {"name": owner.replace(".", "/")}, "name": method}})
    return {"type": "jdk.ExecutionSample", "values": {"stackTrace": {"frames": methods}}}


def test_a_description_parse_inside_a_write_counts_as_the_parse() -> None:
    sqlite = "software.amazon.dynamodb.services.local.shared.access.sqlite"
    events = [
        _sample("com.fasterxml.jackson.core.json.UTF8StreamJsonParser.nextToken", f"{sqlite}.SQLiteDBAccess$25.doWork"),
        _sample(
            "com.fasterxml.jackson.X.read",
            f"{sqlite}.SQLiteDBAccessJob.getTableSchemaInfo2",
            f"{sqlite}.SQLiteDBAccess$17.doWork",
        ),
        _sample(f"{sqlite}.LocalDBUtils.getItemSizeBytes", f"{sqlite}.SQLiteDBAccess$17.doWork"),
    ]
    counts = count_parts(events)
    assert counts[PARSE] == 2
    assert counts["item rows read and written in SQLite (its Java side)"] == 1


def test_a_request_thread_goes_to_its_operation_before_its_http_frames() -> None:
    function = "software.amazon.dynamodb.services.local.TransactWriteItemsFunction.validateRequest"
    events = [
        _sample(
            "x.DynamoDbParser.parseExpression",
            function,
            "x.LocalDynamoDBServerHandler.handle",
            "org.eclipse.jetty.server.Server.handle",
        ),
        _sample("org.eclipse.jetty.http.HttpParser.parseFields", "org.eclipse.jetty.io.ManagedSelector.run"),
        _sample("java.lang.Thread.run"),
        {"type": "jdk.ExecutionSample", "values": {}},
    ]
    counts = count_parts(events)
    assert (counts[TRANSACTION], counts[HTTP], counts["other"]) == (1, 1, 2)


def test_a_sample_time_is_read_to_the_nanosecond_as_utc() -> None:
    event = {"values": {"startTime": "2026-12-06T03:09:18.482482697Z"}}
    assert abs(_epoch_s(event) - 1796526558.482482697) < 1e-6
