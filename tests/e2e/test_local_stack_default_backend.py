"""``make run``'s default backend keeps DynamoDB's guarantees under concurrent requests: creates racing on one
user's id counter all succeed with distinct ids, and one uuid sent by many users at once is won by exactly one.
(On the previous default, an unserialized moto, this produced spurious 409s, duplicate ids and phantom rows.)"""

from __future__ import annotations

import os
import shutil
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from amsg.timeutil import iso_from_ms
from amsg_local.cli import LocalStack

from tests.support.wire_client import WireClient, http_transport

pytestmark = pytest.mark.e2e
USERS = 50


@pytest.fixture(scope="module")
def world(shared_stack: dict[str, Any]) -> dict[str, Any]:
    stack, push = shared_stack["stack"], shared_stack["push"]
    users = []
    for _ in range(USERS):
        client = WireClient(http_transport(stack.base_url), str(uuid.uuid4()))
        client.init()
        assert client.put_subscription(push.subscribe().to_json()).status == 200
        users.append(client)
    return {"stack": stack, "users": users}


def _schedule(client: WireClient, task_uuid: str, first: str) -> Any:
    body = {"uuid": task_uuid, "contactName": "Rei", "messageType": "fixed", "userMessage": "hi"}
    return client.schedule({**body, "firstSendTime": first})


def _items(stack: LocalStack, prefix: str) -> list[dict[str, Any]]:
    ddb = stack.client("dynamodb")
    pages = ddb.get_paginator("scan").paginate(TableName=stack.table_name)
    return [item for page in pages for item in page["Items"] if item["PK"]["S"].startswith(prefix)]


def test_default_backend_is_dynamodb_local_when_java_is_present(world: dict[str, Any]) -> None:
    stack = world["stack"]
    if shutil.which("java") or os.environ.get("CI"):
        assert stack.backend == "dynamodb-local"
    else:
        assert stack.backend == "moto"


def test_concurrent_creates_with_distinct_uuids_all_succeed_with_distinct_ids(world: dict[str, Any]) -> None:
    stack, users = world["stack"], world["users"][:10]
    first = iso_from_ms(int(stack.post_local("/_local/clock", {"advanceMs": 0})["nowMs"]) + 3_600_000)
    jobs = [(users[i % 10], str(uuid.uuid4())) for i in range(50)]  # 10 users x 5 creates, all at once
    with ThreadPoolExecutor(50) as pool:
        replies = list(pool.map(lambda job: _schedule(job[0], job[1], first), jobs))
    assert [r.status for r in replies] == [201] * 50, [r.text for r in replies if r.status != 201]
    for user in users:
        ids = sorted(r.data["id"] for (owner, _), r in zip(jobs, replies, strict=True) if owner is user)
        assert ids == [1, 2, 3, 4, 5]  # the per-user counter never hands out one id twice
    tasks = [i for i in _items(stack, "U#") if i["SK"]["S"].startswith("T#")]
    mine = {job_uuid for _, job_uuid in jobs}
    assert sorted(i["uuid"]["S"] for i in tasks if i["uuid"]["S"] in mine) == sorted(mine)  # no phantom rows


def test_one_uuid_sent_by_fifty_users_at_once_is_won_by_exactly_one(world: dict[str, Any]) -> None:
    stack, users = world["stack"], world["users"]
    first = iso_from_ms(int(stack.post_local("/_local/clock", {"advanceMs": 0})["nowMs"]) + 3_600_000)
    contested = str(uuid.uuid4())
    with ThreadPoolExecutor(USERS) as pool:
        replies = list(pool.map(lambda user: _schedule(user, contested, first), users))
    statuses = sorted(r.status for r in replies)
    assert statuses == [201] + [409] * (USERS - 1), [r.text for r in replies if r.status not in (201, 409)]
    assert {r.code for r in replies if r.status == 409} == {"TASK_UUID_CONFLICT"}
    winner = next(user for user, r in zip(users, replies, strict=True) if r.status == 201)
    rows = [i for i in _items(stack, "U#") if i["SK"]["S"] == f"T#{contested}"]
    assert [row["PK"]["S"] for row in rows] == [f"U#{winner.user_id}"]
    (registry,) = _items(stack, f"TU#{contested}")
    assert registry["user_id"]["S"] == winner.user_id
