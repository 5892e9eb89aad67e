"""The SQS message model: what the tick writes is exactly what run_task parses; anything else is dropped."""

import json

import pytest
from amsg.engine.messages import TaskMessage, parse_task_message


def test_round_trip():
    message = TaskMessage("user-1", "task-1", 3, 1_893_456_000_000)
    assert message.to_body()["nextSendAt"] == "2030-01-01T00:00:00.000Z"  # the queue's wire form is unchanged
    assert parse_task_message(json.dumps(message.to_body())) == message


@pytest.mark.parametrize(
    "body",
    [
        None,
        "",
        "not json",
        "[]",
        json.dumps({"userId": "u", "uuid": "t", "claimVersion": 0, "nextSendAt": "x"}),
        json.dumps({"userId": "u", "uuid": "t", "claimVersion": True, "nextSendAt": "x"}),
        json.dumps({"userId": "u", "uuid": "t", "claimVersion": "1", "nextSendAt": "x"}),
        json.dumps({"userId": "", "uuid": "t", "claimVersion": 1, "nextSendAt": "x"}),
        json.dumps({"userId": "u", "uuid": "t" * 300, "claimVersion": 1, "nextSendAt": "x"}),
        json.dumps({"userId": "u", "claimVersion": 1, "nextSendAt": "x"}),
        json.dumps({"userId": "u", "uuid": "t", "claimVersion": 1, "nextSendAt": "not a time"}),
    ],
)
def test_malformed_bodies_are_dropped(body):
    assert parse_task_message(body) is None
