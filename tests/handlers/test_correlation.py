"""A correlation id follows a task from the API request that created it, through the SQS message, into the log
lines run_task writes while delivering it (real handlers on moto)."""

from __future__ import annotations

import io
import json
import logging
import types
import uuid

import pytest
from amsg.engine.messages import TaskMessage, parse_task_message

from tests.conftest import moto_table_resource
from tests.handlers.test_delivery import due, schedule
from tests.support import inprocess

pytestmark = pytest.mark.memory_store  # the engine on the in-memory fakes under `make unit`


def _log_lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.startswith('{"level"')]


@pytest.mark.dynamo_store
def test_the_api_request_id_reaches_run_task_logs(engine, monkeypatch):
    request_ids: list[str] = []
    original = inprocess.build_v2_event

    def recording(*args, **kwargs):
        event = original(*args, **kwargs)
        request_ids.append(event["requestContext"]["requestId"])
        return event

    monkeypatch.setattr(inprocess, "build_v2_event", recording)
    created = schedule(engine)
    (request_id,) = request_ids
    item = moto_table_resource("amsg-test").scan()["Items"]
    (task,) = [i for i in item if i.get("uuid") == created["uuid"] and "corr_id" in i]
    assert task["corr_id"] == request_id

    due(engine)
    engine.harness.tick()
    (body,) = engine.harness.queued_bodies()
    assert body["correlationId"] == request_id
    from amsg.observability import logger

    stream = io.StringIO()  # the service logger's own JSON lines, as CloudWatch would receive them
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logger.registered_formatter)
    logger.addHandler(handler)
    try:
        engine.harness.drain()
    finally:
        logger.removeHandler(handler)
    delivered = [line for line in _log_lines(stream.getvalue()) if line["message"] == "task delivered"]
    assert [line["correlation_id"] for line in delivered] == [request_id]


def test_messages_without_a_correlation_id_still_parse():
    plain = {"userId": "u", "uuid": "t", "claimVersion": 1, "nextSendAt": "2030-01-01T00:00:00.000Z"}
    assert parse_task_message(json.dumps(plain)) == TaskMessage("u", "t", 1, 1_893_456_000_000)
    assert "correlationId" not in TaskMessage("u", "t", 1, 1).to_body()
    for bad in ("", "x" * 129, "a\nb", 7):
        message = parse_task_message(json.dumps({**plain, "correlationId": bad}))
        assert message is not None and message.correlation_id is None
    message = parse_task_message(json.dumps({**plain, "correlationId": "abc-123"}))
    assert message is not None and message.correlation_id == "abc-123"


def test_records_of_one_batch_run_together_each_with_its_own_correlation_id(engine):
    """Three users' tasks in one SQS batch: the real handler runs them on worker threads at the same time; each
    record's log lines carry the correlation id of the request that created its task."""
    from amsg.observability import logger

    from tests.support.inprocess import InProcessApi
    from tests.support.wire_client import WireClient

    by_uuid: dict[str, str] = {}
    for _ in range(3):
        client = WireClient(InProcessApi(), user_id=str(uuid.uuid4()))
        client.init()
        assert client.put_subscription(engine.push.subscribe().to_json()).status == 200
        created = schedule(types.SimpleNamespace(api=client))
        by_uuid[created["uuid"]] = ""
    due(engine)
    engine.harness.tick()
    bodies = engine.harness.queued_bodies()
    assert len(bodies) == 3 and len({b["userId"] for b in bodies}) == 3
    for body in bodies:
        by_uuid[body["uuid"]] = body["correlationId"]
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logger.registered_formatter)
    logger.addHandler(handler)
    try:
        assert engine.harness.drain() == 3
    finally:
        logger.removeHandler(handler)
    delivered = [line for line in _log_lines(stream.getvalue()) if line["message"] == "task delivered"]
    assert {line["summary"]["taskUuid"]: line["correlation_id"] for line in delivered} == by_uuid
    assert len(set(by_uuid.values())) == 3
    assert len(engine.push.received) == 6  # two sentences each, each pushed once
