"""Agentic fires end to end over real HTTP: the local stack (gateway → handlers → DynamoDB/SQS → tick →
run_task) with ``AMSG_HOOKS_MODULE`` set, the example companion (examples/hooks/companion.py) driving a
loopback LLM that asks for tools, and a loopback push service that decrypts every push.

The stack loads ``tests.support.hooks_agentic``, whose hooks delegate to the example by default (so every
receipt is observable) and can be re-scripted per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from amsg.timeutil import iso_from_ms, parse_iso_ms

from examples.hooks import companion
from tests.support import hooks_agentic
from tests.support.e2e_stack import stack_with_push
from tests.support.fake_llm import FakeLlmServer
from tests.support.hooks_agentic import SCRIPT
from tests.support.wire_client import WireClient, http_transport

pytestmark = pytest.mark.e2e
TOKEN = "e2e-agentic-token"
MINUTE = 60_000
KEY = "sk-e2e-agentic-0123456789"


@pytest.fixture(scope="module")
def world() -> Iterator[dict]:
    with (
        FakeLlmServer() as llm,
        # the hooks are scripted from this process (SCRIPT: closures, live contexts, receipts), so the sandboxes
        # must live in it too; the companion alone runs in process sandboxes in the last test
        stack_with_push(
            AMSG_CLIENT_TOKEN=TOKEN, AMSG_HOOKS_MODULE="tests.support.hooks_agentic", sandboxes="thread"
        ) as (stack, push),
    ):
        yield {"stack": stack, "push": push, "llm": llm}


@pytest.fixture
def user(world) -> Iterator[WireClient]:
    hooks_agentic.reset()
    SCRIPT.before, SCRIPT.output, SCRIPT.tools = (
        companion.on_before_fire,
        companion.on_llm_output,
        companion.execute_tool_calls,
    )
    client = WireClient(http_transport(world["stack"].base_url), str(uuid.uuid4()), server_token=TOKEN)
    client.init()
    subscription = world["push"].subscribe()
    assert client.put_subscription(subscription.to_json()).status == 200
    client.endpoint_id = subscription.endpoint_id  # type: ignore[attr-defined]
    yield client
    hooks_agentic.reset()


def now_ms(world) -> int:
    return world["stack"].post_local("/_local/clock", {"advanceMs": 0})["nowMs"]


def advance_and_tick(world, ms: int) -> dict:
    world["stack"].post_local("/_local/clock", {"advanceMs": ms})
    return world["stack"].post_local("/_local/tick")


def schedule(world, client: WireClient, at_ms: int, **fields) -> dict:
    body = {
        "contactName": "Rei",
        "messageType": "prompted",
        "completePrompt": "Check in on me.",
        "firstSendTime": iso_from_ms(at_ms),
        "apiUrl": world["llm"].base_url + "/v1",
        "apiKey": KEY,
        "primaryModel": "m",
        "tzId": "Asia/Tokyo",
        **fields,
    }
    resp = client.schedule(body)
    assert resp.status == 201, resp.text
    return resp.data


def state(client: WireClient, namespace: str = "companion") -> dict[str, str]:
    return {e["key"]: e["value"] for e in client.get_client_state(namespace).data["entries"]}


def pushes(world, client) -> list[dict]:
    return world["push"].payloads(client.endpoint_id)


def test_companion_calls_a_tool_pushes_remembers_and_schedules_its_follow_up(world, user):
    llm = world["llm"]
    start = now_ms(world)
    assert (
        user.put_client_state([{"namespace": "companion", "key": "mood", "value": "tired", "updatedAt": start}]).status
        == 200
    )
    created = schedule(world, user, start + MINUTE)
    before = len(llm.requests)
    llm.reply_tool_calls(("call_t", "get_local_time", {}), usage={"prompt_tokens": 9, "completion_tokens": 1})
    llm.reply_content("晚上好，今天辛苦了。", usage={"prompt_tokens": 20, "completion_tokens": 6})
    advance_and_tick(world, MINUTE + 1_000)

    first, second = (r.json for r in llm.requests[before:])
    assert "tired" in first["messages"][0]["content"] and first["tools"][0]["function"]["name"] == "get_local_time"
    tool_turn = second["messages"][-1]
    assert tool_turn["role"] == "tool" and tool_turn["tool_call_id"] == "call_t"
    (push,) = pushes(world, user)
    assert push["message"] == "晚上好，今天辛苦了。" and push["title"] == "来自 Rei"
    assert push["taskUuid"] == created["uuid"] and push["messageId"].endswith("_hook_0")
    assert state(user)["last_message"] == "晚上好，今天辛苦了。"
    (settled,) = SCRIPT.settled
    assert settled["status"] == "sent" and settled["iterations"] == 2
    assert settled["usage_total"] == {"prompt_tokens": 29, "completion_tokens": 7, "total_tokens": 36}
    tasks = user.list_messages().data["tasks"]
    assert [t["uuid"] for t in tasks if t["uuid"] == created["uuid"]] == []  # the one-shot is done
    (follow,) = tasks
    assert follow["messageType"] == "prompted" and follow["status"] == "pending"
    # the hook schedules four hours after its fire's "now", which lies between the advanced start and now
    follow_ms = parse_iso_ms(follow["nextSendAt"])
    assert start + MINUTE + 1_000 + 4 * 3_600_000 <= follow_ms <= now_ms(world) + 4 * 3_600_000
    assert user.get_message(follow["uuid"]).data["task"]["metadata"] == {"followUpOf": created["uuid"]}

    # four hours later the user is chatting in the app: the follow-up skips, and schedules nothing more
    later = now_ms(world) + 4 * 3_600_000
    assert (
        user.put_client_state(
            [{"namespace": "companion", "key": "last_seen", "value": str(later), "updatedAt": later}]
        ).status
        == 200
    )
    advance_and_tick(world, 4 * 3_600_000 + 1_000)
    assert [s["status"] for s in SCRIPT.settled] == ["sent", "skipped"]
    assert SCRIPT.settled[-1]["skip_reason"] == "before-fire"
    assert len(pushes(world, user)) == 1 and user.list_messages().data["tasks"] == []


def test_quiet_hours_defer_the_fire_without_consuming_a_retry(world, user):
    start = now_ms(world)
    quiet_until = start + 30 * MINUTE
    entry = {"namespace": "companion", "key": "quiet_until", "value": str(quiet_until), "updatedAt": start}
    assert user.put_client_state([entry]).status == 200
    created = schedule(world, user, start + MINUTE)
    advance_and_tick(world, MINUTE + 1_000)
    detail = user.get_message(created["uuid"]).data["task"]
    assert detail["status"] == "pending" and detail["retryCount"] == 0
    assert SCRIPT.settled[-1]["status"] == "deferred"
    assert abs(parse_iso_ms(SCRIPT.settled[-1]["retry_after"]) - quiet_until) < 1_000
    advance_and_tick(world, 10 * MINUTE)
    assert len(SCRIPT.settled) == 1  # not asked again before the wake-up
    world["llm"].reply_content("醒了吗？")
    advance_and_tick(world, 20 * MINUTE)
    assert [p["message"] for p in pushes(world, user)] == ["醒了吗？"]
    assert [s["status"] for s in SCRIPT.settled] == ["deferred", "sent"]


def test_results_cancel_renew_validation_and_budgets_over_http(world, user):
    start = now_ms(world)
    doomed = schedule(world, user, start + 60 * MINUTE)
    moved = schedule(world, user, start + 60 * MINUTE)
    seen: dict = {}

    def output(ctx):
        seen["apiKey"] = "apiKey" in ctx.task
        seen["result"] = ctx.emit_result({"resultKind": "summary", "text": "写好了日记"})
        seen["cancel"] = ctx.cancel_task(doomed["uuid"])
        seen["renew"] = ctx.renew_task(moved["uuid"], iso_from_ms(start + 120 * MINUTE))
        return {"decision": "skip-push"}

    SCRIPT.before = lambda ctx: [{"role": "user", "content": "x"}]
    SCRIPT.output = output
    main = schedule(world, user, start + MINUTE)
    advance_and_tick(world, MINUTE + 1_000)
    assert seen["apiKey"] is False and seen["cancel"] == {"cancelled": True} and seen["renew"]["renewed"] is True
    (result,) = pushes(world, user)
    assert (
        result["messageKind"] == "result" and result["resultKind"] == "summary" and result["taskUuid"] == main["uuid"]
    )
    assert user.get_message(doomed["uuid"]).status == 404
    assert user.get_message(moved["uuid"]).data["task"]["nextSendAt"] == iso_from_ms(start + 120 * MINUTE)
    entries, _ = user.outbox_sync()
    assert [e["messageId"] for e in entries if e["taskUuid"] == main["uuid"]] == [result["messageId"]]

    # a bad decision is permanent; an exhausted loop is retried with back-off
    SCRIPT.output = lambda ctx: {"decision": "finish"}
    bad = schedule(world, user, now_ms(world) + MINUTE)
    advance_and_tick(world, MINUTE + 1_000)
    failed = user.get_message(bad["uuid"])
    assert failed.status == 409 and failed.code == "TASK_ALREADY_COMPLETED"
    assert failed.body["error"]["details"]["lastError"]["errorCode"] == "AGENTIC_BAD_DECISION"
    SCRIPT.before = lambda ctx: {"messages": [{"role": "user", "content": "x"}], "max_tool_iterations": 1}
    SCRIPT.output = lambda ctx: {"decision": "continue", "next_history": ctx.messages}
    looping = schedule(world, user, now_ms(world) + MINUTE)
    advance_and_tick(world, MINUTE + 1_000)
    detail = user.get_message(looping["uuid"]).data["task"]
    assert detail["retryCount"] == 1 and detail["lastError"]["errorCode"] == "AGENTIC_LOOP_EXCEEDED"
    assert [s["status"] for s in SCRIPT.settled][-2:] == ["failed", "failed"]
    assert SCRIPT.settled[-2]["will_retry"] is False and SCRIPT.settled[-1]["will_retry"] is True


def test_capabilities_advertise_the_hook_features_in_reference_order(world, user):
    features = user.capabilities().body["features"]
    hook_features = [
        f for f in features if f.startswith("agentic") or "hook" in f or f in ("emit-result", "before-fire-defer")
    ]
    assert hook_features == [
        "agentic-hooks", "agentic-scratch", "agentic-write-state", "agentic-fire-tools", "agentic-schedule-task",
        "after-send-hook", "hook-state-accessors", "recurring-stale-skip-hook", "fire-settled-hook",
        "agentic-cancel-renew-task", "hook-usage", "emit-result", "hook-usage-total", "before-fire-defer",
    ]  # fmt: skip


def test_the_companion_hooks_run_inside_process_sandboxes() -> None:
    """The example companion as the stack's hooks module, in process sandboxes (the default; the module loads
    inside the tick and run_task sandboxes from ``AMSG_HOOKS_MODULE``): observed only over HTTP, through the
    loopback LLM and through the push service, since nothing in this process can script those sandboxes."""
    with (
        FakeLlmServer() as llm,
        stack_with_push(AMSG_CLIENT_TOKEN=TOKEN, AMSG_HOOKS_MODULE="examples.hooks.companion") as (stack, push),
    ):
        world = {"stack": stack, "push": push, "llm": llm}
        assert stack.gateway.runtime.sandboxes == "process"
        client = WireClient(http_transport(stack.base_url), str(uuid.uuid4()), server_token=TOKEN)
        client.init()
        subscription = push.subscribe()
        assert client.put_subscription(subscription.to_json()).status == 200
        client.endpoint_id = subscription.endpoint_id  # type: ignore[attr-defined]
        start = now_ms(world)
        entry = {"namespace": "companion", "key": "mood", "value": "tired", "updatedAt": start}
        assert client.put_client_state([entry]).status == 200
        created = schedule(world, client, start + MINUTE)
        llm.reply_tool_calls(("call_t", "get_local_time", {}))
        llm.reply_content("晚上好。")
        advance_and_tick(world, MINUTE + 1_000)

        first, second = (r.json for r in llm.requests)
        assert "tired" in first["messages"][0]["content"] and first["tools"][0]["function"]["name"] == "get_local_time"
        assert second["messages"][-1]["role"] == "tool"
        (delivered,) = pushes(world, client)
        assert delivered["message"] == "晚上好。" and delivered["taskUuid"] == created["uuid"]
        assert state(client)["last_message"] == "晚上好。"
        (follow,) = client.list_messages().data["tasks"]  # the hook's follow-up, scheduled from the sandbox
        assert client.get_message(follow["uuid"]).data["task"]["metadata"] == {"followUpOf": created["uuid"]}
        functions = stack.gateway.runtime.stats()["functions"]
        assert functions["RunTaskFunction"]["invocations"] >= 1 and functions["TickFunction"]["invocations"] >= 1
