"""The multi-tenant line end to end on the local stack (gateway → real handlers → DynamoDB + SQS + KMS → tick →
run_task → a loopback push service that decrypts every push and checks its VAPID token): two tenants made with
init-tenant, the same user id in both, a task each delivered by the scheduled tick, then a task each delivered
through ``send-notifications`` with the tenant's cron token and no manual tick at all."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from amsg.timeutil import iso_from_ms

from tests.support.e2e_stack import stack_with_push
from tests.support.wire_client import WireClient, http_transport

pytestmark = pytest.mark.e2e
INIT_SECRET = "e2e-init-secret"
MINUTE = 60_000


@pytest.fixture(scope="module")
def world() -> Iterator[tuple]:
    with stack_with_push(
        AMSG_TENANCY="multi", AMSG_TENANT_TOKEN_SIGNING_KEY="e2e-signing-key", AMSG_INIT_SECRET=INIT_SECRET
    ) as (stack, push):
        yield stack, push


def v1(stack) -> object:
    send = http_transport(stack.base_url)
    return lambda method, path, headers, body: send(method, "/api/v1" + path, headers, body)


def make_tenant(stack, push, user_id: str):
    raw = WireClient(v1(stack), user_id="-")
    created = raw.request(
        "POST", "/init-tenant", headers={"X-Init-Secret": INIT_SECRET, "Content-Type": "application/json"}, body="{}"
    )
    assert created.status == 201, created.text
    data = created.data
    client = WireClient(v1(stack), user_id, extra_headers={"Authorization": f"Bearer {data['tenantToken']}"})
    client.init()
    subscription = push.subscribe()
    assert client.put_subscription(subscription.to_json()).status == 200
    client.endpoint_id = subscription.endpoint_id  # type: ignore[attr-defined]
    return client, data


def now_ms(stack) -> int:
    return stack.post_local("/_local/clock", {"advanceMs": 0})["nowMs"]


def schedule(client: WireClient, text: str, at_ms: int) -> str:
    resp = client.schedule(
        {"contactName": "Rei", "messageType": "fixed", "userMessage": text, "firstSendTime": iso_from_ms(at_ms)}
    )
    assert resp.status == 201, resp.text
    return resp.data["uuid"]


def wait_for(push, endpoint_id: str, count: int, timeout_s: float = 60.0) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = push.payloads(endpoint_id)
        if len(got) >= count:
            return got
        time.sleep(0.2)
    return push.payloads(endpoint_id)


def test_two_tenants_one_user_id_scheduled_tick_and_cron_deliveries(world):
    stack, push = world
    user_id = str(uuid.uuid4())
    (a, a_data), (b, b_data) = make_tenant(stack, push, user_id), make_tenant(stack, push, user_id)
    assert a.user_key != b.user_key and a_data["tenantId"] != b_data["tenantId"]

    # the scheduled tick serves both tenants
    start = now_ms(stack)
    tasks = {"a": schedule(a, "tick for A", start + 2 * MINUTE), "b": schedule(b, "tick for B", start + 2 * MINUTE)}
    assert b.get_message(tasks["a"]).code == "TASK_NOT_FOUND"  # the same user id, another tenant: another user
    stack.post_local("/_local/clock", {"advanceMs": 2 * MINUTE + 1000})
    summary = stack.post_local("/_local/tick")
    assert summary["success"] is True
    for client, key, text in ((a, "a", "tick for A"), (b, "b", "tick for B")):
        got = wait_for(push, client.endpoint_id, 1)
        assert [(p["taskUuid"], p["message"]) for p in got] == [(tasks[key], text)]

    # send-notifications with each tenant's cron token (query and header forms): only that tenant's due work,
    # delivered by the queue's consumer without any manual tick
    start = now_ms(stack)
    cron = {"a": schedule(a, "cron for A", start + MINUTE), "b": schedule(b, "cron for B", start + MINUTE)}
    stack.post_local("/_local/clock", {"advanceMs": MINUTE + 1000})
    raw = WireClient(v1(stack), user_id="-")
    by_query = raw.request("POST", f"/send-notifications?token={a_data['cronToken']}", user=False)
    assert by_query.status == 200, by_query.text
    assert by_query.data["totalTasks"] == 1 and by_query.data["successCount"] == 1
    assert [p["message"] for p in wait_for(push, a.endpoint_id, 2)][1:] == ["cron for A"]
    assert len(push.payloads(b.endpoint_id)) == 1  # B's due task waits for B's cron (or the tick)
    by_header = raw.request(
        "POST", "/send-notifications", headers={"Authorization": f"Bearer {b_data['cronToken']}"}, user=False
    )
    assert by_header.status == 200 and by_header.data["successCount"] == 1, by_header.text
    got_b = wait_for(push, b.endpoint_id, 2)
    assert [(p["taskUuid"], p["message"]) for p in got_b][1:] == [(cron["b"], "cron for B")]
    assert all(r.vapid.ok for r in push.received)
    # a tenant token is not a cron token
    wrong = raw.request(
        "POST", "/send-notifications", headers={"Authorization": f"Bearer {a.extra_headers['Authorization'][7:]}"}
    )
    assert wrong.status == 401 and wrong.code == "INVALID_TENANT_AUTH"
