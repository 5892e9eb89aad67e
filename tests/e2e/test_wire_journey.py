"""End to end over real HTTP: the local stack (gateway → real handlers → embedded DynamoDB + SQS → tick →
run_task) driven by an independent implementation of the wire protocol, with a loopback push service that
decrypts every push (RFC 8291) and verifies its VAPID token (RFC 8292), and a loopback OpenAI-compatible LLM."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from amsg.timeutil import iso_from_ms, parse_iso_ms
from amsg.vapid import generate_vapid_keys
from amsg_local.cli import LocalStack, start_local_stack

from tests.support.fake_llm import FakeLlmServer
from tests.support.fake_push import FakePushService
from tests.support.wire_client import WireClient, http_transport

pytestmark = pytest.mark.e2e
TOKEN = "e2e-shared-token"
MINUTE = 60_000


@pytest.fixture(scope="module")
def world() -> Iterator[dict]:
    public, private = generate_vapid_keys()
    with FakePushService(vapid_public_key=public) as push, FakeLlmServer() as llm:
        config = {
            "AMSG_MASTER_KEY": "c" * 64,
            "AMSG_CLIENT_TOKEN": TOKEN,
            "AMSG_VAPID_PUBLIC_KEY": public,
            "AMSG_VAPID_PRIVATE_KEY": private,
            "AMSG_VAPID_EMAIL": "e2e@example.test",
            "AMSG_PUSH_PACING_MS": "0",
        }
        with start_local_stack(config=config) as stack:
            yield {"stack": stack, "push": push, "llm": llm, "public": public}


def local(stack: LocalStack, path: str, body: dict | None = None) -> dict:
    return stack.post_local(path, body)


def now_ms(stack: LocalStack) -> int:
    return local(stack, "/_local/clock", {"advanceMs": 0})["nowMs"]


def tick(stack: LocalStack) -> dict:
    return local(stack, "/_local/tick")


@pytest.fixture
def user(world) -> WireClient:
    client = WireClient(http_transport(world["stack"].base_url), str(uuid.uuid4()), server_token=TOKEN)
    client.init()
    subscription = world["push"].subscribe()
    assert client.put_subscription(subscription.to_json()).status == 200
    client.endpoint_id = subscription.endpoint_id  # type: ignore[attr-defined]
    return client


def pushes_for(world, client) -> list[dict]:
    return world["push"].payloads(client.endpoint_id)


def test_key_subscription_schedule_list_get_update_cancel(world, user):
    stack = world["stack"]
    first = iso_from_ms(now_ms(stack) + 10 * MINUTE)
    fixed = user.schedule({"contactName": "Rei", "messageType": "fixed", "userMessage": "hi", "firstSendTime": first})
    assert fixed.status == 201 and fixed.data["id"] == 1
    prompted = user.schedule(
        {
            "contactName": "Rei",
            "messageType": "prompted",
            "completePrompt": "p",
            "firstSendTime": first,
            "apiUrl": world["llm"].base_url,
            "apiKey": "sk-e2e-0123456789abcdef",
            "primaryModel": "m",
        }
    )
    auto = user.schedule(
        {
            "contactName": "Rei",
            "messageType": "auto",
            "firstSendTime": first,
            "recurrenceType": "weekly",
            "messages": [{"role": "user", "content": "hello"}],
            "apiUrl": world["llm"].base_url,
            "apiKey": "sk-e2e-0123456789abcdef",
            "primaryModel": "m",
        }
    )
    assert prompted.status == 201 and auto.status == 201, (prompted.text, auto.text)
    listed = user.list_messages()
    assert listed.data["pagination"]["total"] == 3
    assert {t["messageType"] for t in listed.data["tasks"]} == {"fixed", "prompted", "auto"}
    detail = user.get_message(auto.data["uuid"]).data["task"]
    assert detail["recurrenceType"] == "weekly" and "apiKey" not in json.dumps(detail)
    upd = user.update(fixed.data["uuid"], {"userMessage": "hello again", "messageSubtype": "greeting"})
    assert upd.data["updatedFields"] == ["userMessage", "messageSubtype"]
    assert user.cancel(prompted.data["uuid"]).status == 200
    assert user.list_messages().data["pagination"]["total"] == 2
    for created in (fixed, auto):
        user.cancel(created.data["uuid"])


def test_error_matrix_over_http(world, user):
    anonymous = WireClient(http_transport(world["stack"].base_url), user.user_id)
    assert anonymous.request("GET", "/get-user-key").code == "INVALID_CLIENT_TOKEN"
    assert user.request("GET", "/get-user-key", user=False).code == "USER_ID_REQUIRED"
    assert user.request("POST", "/schedule-message", body="{}", headers={}).code == "ENCRYPTION_REQUIRED"
    enc = {"X-Payload-Encrypted": "true", "X-Encryption-Version": "1"}
    assert user.request("POST", "/schedule-message", body="{}", headers=enc).code == "INVALID_ENCRYPTED_PAYLOAD"
    assert user.request("POST", "/schedule-message", body="x", headers={**enc, "Content-Encoding": "br"}).status == 415
    assert user.schedule({"contactName": "Rei", "messageType": "weird"}).code == "INVALID_MESSAGE_TYPE"
    assert user.update(str(uuid.uuid4()), {"contactName": "x"}).code == "TASK_NOT_FOUND"
    assert user.request("GET", "/nowhere").status == 404
    assert user.request("GET", "/api/v1/capabilities").status == 200


def test_every_message_type_is_pushed_with_the_reference_payload(world, user):
    stack, push, llm = world["stack"], world["push"], world["llm"]
    llm.reply_think("thinking about you", "早安！今天天气很好。")
    start = now_ms(stack)
    first_ms = start + 2 * MINUTE
    first = iso_from_ms(first_ms)
    fixed = user.schedule(
        {
            "contactName": "Rei",
            "messageType": "fixed",
            "userMessage": "一。二",
            "firstSendTime": first,
            "splitPattern": "(。)",
        }
    ).data
    auto = user.schedule(
        {
            "contactName": "Rei",
            "messageType": "auto",
            "completePrompt": "p",
            "firstSendTime": first,
            "apiUrl": llm.v1_url,
            "apiKey": "sk-e2e-0123456789abcdef",
            "primaryModel": "m",
            "maxTokens": 50,
        }
    ).data
    local(stack, "/_local/clock", {"advanceMs": 2 * MINUTE + 1000})
    summary = tick(stack)
    assert summary["success"] is True
    got = pushes_for(world, user)
    by_task = {}
    for p in got:
        by_task.setdefault(p["taskUuid"], []).append(p)
    fixed_pushes = by_task[fixed["uuid"]]
    assert [p["message"] for p in fixed_pushes] == ["一。", "二"]
    assert [p["messageId"] for p in fixed_pushes] == [f"msg_task_{fixed['id']}@{first_ms}_{i}" for i in range(2)]
    auto_pushes = by_task[auto["uuid"]]
    assert [p["message"] for p in auto_pushes] == ["早安！", "今天天气很好。"]
    assert {p["messageKind"] for p in auto_pushes} == {"content"}
    assert llm.last_request.json["max_tokens"] == 50
    # the reasoning push is in the outbox (pull), not pushed
    outbox = user.get_encrypted("/outbox").data["entries"]
    kinds = {(e["push"]["taskUuid"], e["push"]["messageKind"]) for e in outbox}
    assert (auto["uuid"], "reasoning") in kinds
    reasoning = next(e["push"] for e in outbox if e["push"]["messageKind"] == "reasoning")
    assert reasoning["reasoningContent"] == "thinking about you"
    assert reasoning["messageId"] == f"msg_task_{auto['id']}@{first_ms}_reasoning"
    assert all(r.vapid.ok for r in push.received_for(user.endpoint_id))


def test_recurrence_across_dst_retry_and_permanent_failure(world, user):
    stack, push = world["stack"], world["push"]
    base = now_ms(stack)
    # a daily task at 08:00 America/New_York on the day before the 2030 spring-forward change (2030-03-10)
    local(stack, "/_local/clock", {"nowMs": parse_iso_ms("2030-03-09T13:00:00Z") - 10 * MINUTE})
    created = user.schedule(
        {
            "contactName": "Rei",
            "messageType": "fixed",
            "userMessage": "早",
            "recurrenceType": "daily",
            "tzId": "America/New_York",
            "firstSendTime": "2030-03-09T13:00:00Z",
        }
    )
    assert created.status == 201, created.text
    daily = created.data
    local(stack, "/_local/clock", {"advanceMs": 11 * MINUTE})
    tick(stack)
    assert user.get_message(daily["uuid"]).data["task"]["nextSendAt"] == "2030-03-10T12:00:00.000Z"
    user.cancel(daily["uuid"])

    push.set_status(user.endpoint_id, 503, 201)
    first_ms = now_ms(stack) + MINUTE
    retried = user.schedule(
        {
            "contactName": "Rei",
            "messageType": "fixed",
            "userMessage": "retry me",
            "firstSendTime": iso_from_ms(first_ms),
        }
    ).data
    local(stack, "/_local/clock", {"advanceMs": MINUTE + 1000})
    tick(stack)
    task = user.list_messages().data["tasks"][0]
    assert task["retryCount"] == 1 and task["lastError"]["pushStatus"] == 503
    local(stack, "/_local/clock", {"advanceMs": 2 * MINUTE})
    tick(stack)
    assert [p["message"] for p in pushes_for(world, user)].count("retry me") == 1
    assert user.get_message(retried["uuid"]).code == "TASK_NOT_FOUND"

    push.set_status(user.endpoint_id, 410)
    gone = user.schedule(
        {
            "contactName": "Rei",
            "messageType": "fixed",
            "userMessage": "gone",
            "firstSendTime": iso_from_ms(now_ms(stack) + MINUTE),
        }
    ).data
    local(stack, "/_local/clock", {"advanceMs": MINUTE + 1000})
    tick(stack)
    resp = user.get_message(gone["uuid"])
    assert resp.status == 409 and resp.body["error"]["details"]["lastError"]["pushStatus"] == 410
    local(stack, "/_local/clock", {"nowMs": base})


def test_stale_expiry_and_fast_forward(world, user):
    stack = world["stack"]
    base = now_ms(stack)
    first = iso_from_ms(base + MINUTE)
    once = user.schedule(
        {"contactName": "Rei", "messageType": "fixed", "userMessage": "x", "firstSendTime": first}
    ).data
    daily = user.schedule(
        {
            "contactName": "Rei",
            "messageType": "fixed",
            "userMessage": "x",
            "firstSendTime": first,
            "recurrenceType": "daily",
        }
    ).data
    local(stack, "/_local/clock", {"advanceMs": 2 * 86_400_000 + 2 * MINUTE})
    tick(stack)
    expired = user.get_message(once["uuid"])
    assert expired.body["error"]["details"]["lastError"]["reason"] == "stale"
    moved = user.get_message(daily["uuid"]).data["task"]
    assert moved["nextSendAt"] == iso_from_ms(base + MINUTE + 3 * 86_400_000)
    assert moved["lastError"]["skippedCount"] == 3
    assert all(p.get("taskUuid") not in (once["uuid"], daily["uuid"]) for p in pushes_for(world, user))
    local(stack, "/_local/clock", {"nowMs": base})


def test_run_task_now_through_the_local_route(world, user):
    stack = world["stack"]
    assert local(stack, "/_local/run-task", {"uuid": str(uuid.uuid4())}) == {
        "success": True,
        "ran": False,
        "reason": "not_found",
    }
    first = iso_from_ms(now_ms(stack) + MINUTE)
    created = user.schedule(
        {"contactName": "Rei", "messageType": "fixed", "userMessage": "run me", "firstSendTime": first}
    )
    assert local(stack, "/_local/run-task", {"uuid": created.data["uuid"]})["reason"] == "not_due"
    local(stack, "/_local/clock", {"advanceMs": MINUTE + 1000})
    result = local(stack, "/_local/run-task", {"uuid": created.data["uuid"]})
    assert result["ran"] is True and result["summary"]["successCount"] == 1
    assert "run me" in [p["message"] for p in pushes_for(world, user)]


def test_prompted_and_instant_pushes_over_http(world, user):
    stack, llm = world["stack"], world["llm"]
    llm.reply_reasoning("晚上好！", "想一想")
    first_ms = now_ms(stack) + MINUTE
    prompted = user.schedule(
        {
            "contactName": "Rei",
            "messageType": "prompted",
            "completePrompt": "evening",
            "firstSendTime": iso_from_ms(first_ms),
            "apiUrl": llm.base_url + "/v1",
            "apiKey": "sk-e2e-0123456789abcdef",
            "primaryModel": "m",
            "messageSubtype": "greeting",
            "metadata": {"charId": "c9"},
        }
    ).data
    instant = user.schedule(
        {"contactName": "Ai", "messageType": "instant", "userMessage": "马上！", "firstSendTime": iso_from_ms(first_ms)}
    )
    assert instant.status == 200 and instant.data["status"] == "sent" and instant.data["messagesSent"] == 1
    local(stack, "/_local/clock", {"advanceMs": MINUTE + 1000})
    tick(stack)
    got = {p["messageId"]: p for p in pushes_for(world, user)}
    sent = got[f"msg_task_{prompted['id']}@{first_ms}_0"]
    assert sent["message"] == "晚上好！" and sent["messageSubtype"] == "greeting"
    assert sent["metadata"] == {"charId": "c9"} and sent["source"] == "scheduled" and sent["messageType"] == "prompted"
    instant_push = next(p for p in got.values() if p["taskUuid"] == instant.data["uuid"])
    assert instant_push["source"] == "instant" and instant_push["title"] == "来自 Ai"


def test_client_state_large_values_round_trip_through_the_gateway(world, user):
    big = "状" * 100_000  # 300 KB of UTF-8
    largest = "x" * 2_999_859  # the largest value one JS-client request can carry (README)
    resp = user.put_client_state(
        [
            {"namespace": "ns", "key": "big", "value": big, "updatedAt": 1},
            {"namespace": "ns", "key": "small", "value": "v", "updatedAt": 1},
        ],
        compact=True,
    )
    assert resp.status == 200 and resp.data["upserted"] == 2, resp.text
    assert (
        user.put_client_state(
            [{"namespace": "m", "key": "k", "value": largest, "updatedAt": 1_700_000_000_000}], compact=True
        ).status
        == 200
    )
    got = user.get_client_state("ns").data["entries"]
    assert [(e["key"], e["value"] == (big if e["key"] == "big" else "v")) for e in got] == [
        ("big", True),
        ("small", True),
    ]
    assert user.get_client_state("m").data["entries"][0]["value"] == largest
    over = user.put_client_state(
        [{"namespace": "m", "key": "k", "value": largest + "x", "updatedAt": 1_700_000_000_001}], compact=True
    )
    assert (over.status, over.code) == (413, "REQUEST_BODY_TOO_LARGE")
    assert user.get_client_state("m").data["entries"][0]["updatedAt"] == 1_700_000_000_000  # nothing lost
