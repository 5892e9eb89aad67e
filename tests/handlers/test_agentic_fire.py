"""Agentic fires through the real handlers on moto: schedule (API) → tick → SQS → run_task → the host's hooks
(tests.support.hooks_agentic, scripted per test) → LLM rounds against the loopback fake → outbox → Web Push."""

from __future__ import annotations

import json

import pytest
from amsg.domain.registry_life import REGISTRY_TTL_S
from amsg.failures import NonRetryableError
from amsg.hooks import load_hooks
from amsg.timeutil import iso_from_ms, parse_iso_ms

from tests.conftest import T0_MS
from tests.handlers.test_delivery import FIRST_MS, due, schedule_ai
from tests.support import hooks_agentic
from tests.support.hooks_agentic import SCRIPT

pytestmark = pytest.mark.memory_store  # the engine on the in-memory fakes under `make unit`

KEY = "sk-agentic-secret-0123456789"


@pytest.fixture
def agentic(engine):
    settings = engine.ctx.settings
    engine.ctx.settings = type(settings)(**{**settings.__dict__, "hooks_module": "tests.support.hooks_agentic"})
    hooks_agentic.reset()
    yield engine
    hooks_agentic.reset()


def fire(engine, ms: int = 61_000) -> dict:
    due(engine, ms)
    summary = engine.harness.tick()
    engine.harness.drain()
    return summary


def task(engine, uuid: str) -> dict | None:
    """The task's projection as clients see it (a failed task answers 409 with its lastError), or None."""
    resp = engine.api.get_message(uuid)
    if resp.status == 200:
        return resp.data["task"]
    row = engine.ctx.tasks.get_task(engine.api.user_id, uuid)
    if row is None:
        return None
    return {"status": row.status, "retryCount": row.retry_count, "lastError": json.loads(row.last_error or "null")}


def test_multi_round_tool_loop_then_finish(agentic):
    engine = agentic
    engine.llm.reply_tool_calls(
        ("call_1", "weather", {"city": "Kyoto"}), usage={"prompt_tokens": 10, "completion_tokens": 2}
    )
    engine.llm.reply_content(
        "It is sunny in Kyoto.", usage={"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}
    )
    tools = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]
    seen: dict = {}

    def before(ctx):
        seen["task"] = dict(ctx.task)
        ctx.scratch["mood"] = "bright"
        return {"messages": [{"role": "user", "content": "hi"}], "tools": tools, "tool_choice": "auto"}

    def output(ctx):
        calls = ctx.llm_response["choices"][0]["message"].get("tool_calls")
        if calls:
            return {"decision": "tool-request", "tool_calls": calls}
        assert ctx.scratch["mood"] == "bright" and ctx.iteration == 1
        return {
            "decision": "finish",
            "push_payloads": [{"messageKind": "content", "message": ctx.llm_output_text, "title": ctx.contact_name}],
        }

    def tools_hook(calls, ctx):
        return [{"role": "tool", "tool_call_id": call["id"], "content": "sunny"} for call in calls]

    SCRIPT.before, SCRIPT.output, SCRIPT.tools = before, output, tools_hook
    created = schedule_ai(engine, KEY, metadata={"charId": "c1"})
    fire(engine)

    assert "apiKey" not in seen["task"] and seen["task"]["uuid"] == created["uuid"]  # hooks never see keys
    requests = [r.json for r in engine.llm.requests]
    assert len(requests) == 2
    assert requests[0]["tools"] == tools and requests[0]["tool_choice"] == "auto"
    second = requests[1]["messages"]
    assert second[0] == {"role": "user", "content": "hi"}
    assert second[1]["tool_calls"][0]["id"] == "call_1"
    assert second[2] == {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}
    (push,) = engine.push.payloads()
    assert push["message"] == "It is sunny in Kyoto." and push["title"] == "Rei"
    assert push["messageId"] == f"msg_task_{created['id']}@{FIRST_MS}_hook_0"
    assert (push["messageIndex"], push["totalMessages"], push["taskUuid"], push["occurrenceMs"]) == (
        1, 1, created["uuid"], FIRST_MS,
    )  # fmt: skip
    (settled,) = SCRIPT.settled
    assert settled["status"] == "sent" and settled["iterations"] == 2 and settled["llm_calls"] == 2
    assert settled["usage_total"] == {"prompt_tokens": 30, "completion_tokens": 7, "total_tokens": 37}
    assert settled["sent_count"] == settled["pushed_count"] == settled["total"] == 1
    assert settled["scratch"] == {"mood": "bright"} and settled["metadata"] == {"charId": "c1"}
    (after,) = SCRIPT.after_send
    assert after["pushed_count"] == 1 and after["error"] is None
    assert task(engine, created["uuid"]) is None  # one-shot done


def test_skip_before_fire_and_skip_push_finalize_without_pushing(agentic):
    engine = agentic
    SCRIPT.before = lambda ctx: {"skip": True}
    skipped = schedule_ai(engine, KEY, recurrenceType="daily")
    fire(engine)
    assert engine.llm.requests == [] and engine.push.payloads() == []
    assert SCRIPT.settled[-1]["status"] == "skipped" and SCRIPT.settled[-1]["skip_reason"] == "before-fire"
    assert task(engine, skipped["uuid"])["nextSendAt"] == "2030-01-01T00:01:00.000Z"  # advanced like a success

    SCRIPT.before = lambda ctx: [{"role": "user", "content": "x"}]
    SCRIPT.output = lambda ctx: {"decision": "skip-push"}
    fire(engine, 61_000 + 86_400_000)
    assert len(engine.llm.requests) == 1 and engine.push.payloads() == []
    assert SCRIPT.settled[-1]["status"] == "skipped" and SCRIPT.settled[-1]["skip_reason"] == "skip-push"


def test_not_handled_falls_back_to_the_frozen_prompt(agentic):
    engine = agentic
    engine.llm.reply_content("legacy")
    schedule_ai(engine, KEY)
    fire(engine)
    assert [p["message"] for p in engine.push.payloads()] == ["legacy"]
    assert [s["status"] for s in SCRIPT.settled] == ["not-handled"]


def test_defer_moves_the_occurrence_without_a_retry_until_it_is_stale(agentic):
    engine = agentic
    SCRIPT.before = lambda ctx: {"defer": {"after_ms": 10 * 60_000}}
    created = schedule_ai(engine, KEY)
    fire(engine)
    row = engine.ctx.tasks.get_task(engine.api.user_id, created["uuid"])
    assert (
        row.retry_count == 0
        and row.retry_after_ms == parse_iso_ms("2029-12-31T00:11:01.000Z")
        and row.status == "pending"
    )
    assert SCRIPT.settled[-1]["status"] == "deferred" and SCRIPT.settled[-1]["retry_after"] == iso_from_ms(
        row.retry_after_ms
    )
    assert engine.harness.tick()["claimedTasks"] == 0  # not due before retry_after
    asks = 1
    now = 61_000
    while engine.ctx.tasks.get_task(engine.api.user_id, created["uuid"]).status == "pending":
        now += 10 * 60_000 + 1_000
        fire(engine, now)
        asks += 1
        assert asks < 10
    assert asks == 6  # the sixth ask would wake up past the stale window: expired instead
    final = engine.ctx.tasks.get_task(engine.api.user_id, created["uuid"])
    assert final.status == "failed" and final.retry_count == 0 and json.loads(final.last_error)["reason"] == "stale"
    assert [s["action"] for s in SCRIPT.stale] == ["expired"]
    assert engine.llm.requests == [] and engine.push.payloads() == []


@pytest.mark.parametrize(
    ("before", "output", "code"),
    [
        (lambda ctx: {"defer": {"after_ms": 0}}, None, "AGENTIC_BAD_BEFORE_FIRE"),
        (lambda ctx: "nope", None, "AGENTIC_BAD_BEFORE_FIRE"),
        (None, lambda ctx: {"decision": "maybe"}, "AGENTIC_BAD_DECISION"),
        (None, lambda ctx: {"decision": "finish", "push_payloads": []}, "AGENTIC_BAD_DECISION"),
        (None, lambda ctx: {"decision": "finish", "push_payload": {"message": "x"}}, "AGENTIC_BAD_DECISION"),
        (None, lambda ctx: {"decision": "finish", "push_payloads": [{"splitPattern": "。"}]}, "AGENTIC_BAD_DECISION"),
        (None, lambda ctx: {"decision": "continue"}, "AGENTIC_BAD_DECISION"),
        (None, lambda ctx: {"decision": "tool-request", "tool_calls": []}, "AGENTIC_BAD_DECISION"),
    ],
)
def test_contract_violations_are_permanent(agentic, before, output, code):
    engine = agentic
    SCRIPT.before = before or (lambda ctx: [{"role": "user", "content": "x"}])
    if output is not None:
        SCRIPT.output = output
    created = schedule_ai(engine, KEY)
    fire(engine)
    final = task(engine, created["uuid"])
    assert final["status"] == "failed" and final["lastError"]["errorCode"] == code
    (settled,) = SCRIPT.settled
    assert settled["status"] == "failed" and settled["will_retry"] is False
    assert settled["failure_stage"] == "generation"


def test_budgets_are_retryable_and_a_raising_hook_follows_the_ladder(agentic):
    engine = agentic
    SCRIPT.before = lambda ctx: {"messages": [{"role": "user", "content": "x"}], "max_tool_iterations": 2}
    SCRIPT.output = lambda ctx: {"decision": "continue", "next_history": ctx.messages}
    created = schedule_ai(engine, KEY)
    fire(engine)
    first = task(engine, created["uuid"])
    assert first["retryCount"] == 1 and first["lastError"]["errorCode"] == "AGENTIC_LOOP_EXCEEDED"
    assert len(engine.llm.requests) == 2
    assert SCRIPT.settled[-1]["will_retry"] is True and SCRIPT.settled[-1]["retry_limit"] == 3

    def boom(ctx):
        raise RuntimeError(f"upstream said {KEY}")

    SCRIPT.before = boom
    fire(engine, 61_000 + 120_000)
    second = task(engine, created["uuid"])
    assert second["retryCount"] == 2 and KEY not in json.dumps(second["lastError"])

    def fatal(ctx):
        raise NonRetryableError("host says no", code="HOST_REFUSED")

    SCRIPT.before = fatal
    fire(engine, 61_000 + 120_000 + 240_000)
    third = task(engine, created["uuid"])
    assert third["status"] == "failed" and third["lastError"]["errorCode"] == "HOST_REFUSED"
    assert [s["status"] for s in SCRIPT.settled] == ["failed", "failed", "failed"]


def test_max_generation_retries_bounds_generation_failures_only(agentic):
    engine = agentic
    SCRIPT.generation_retries = 0

    def boom(ctx):
        raise RuntimeError("no luck")

    SCRIPT.before = boom
    created = schedule_ai(engine, KEY)
    fire(engine)
    final = task(engine, created["uuid"])
    assert final["status"] == "failed" and final["retryCount"] == 0  # limit 0: the first failure is terminal
    assert SCRIPT.settled[-1]["retry_limit"] == 0 and SCRIPT.settled[-1]["will_retry"] is False

    # the frozen-prompt path honours it too (an LLM 503 is otherwise retried)
    SCRIPT.before = lambda ctx: None
    engine.llm.reply_error(503, "overloaded")
    legacy = schedule_ai(engine, KEY, firstSendTime="2029-12-31T00:02:00Z")
    fire(engine, 121_000)
    assert task(engine, legacy["uuid"])["status"] == "failed"

    SCRIPT.generation_retries = -1  # a broken policy is a retryable deployment error
    SCRIPT.before = boom
    broken = schedule_ai(engine, KEY, firstSendTime="2029-12-31T00:03:00Z")
    fire(engine, 181_000)
    assert task(engine, broken["uuid"])["retryCount"] == 1


def test_late_tasks_are_settled_by_the_tick_and_reported_to_on_stale_skip(agentic):
    engine = agentic
    once = schedule_ai(engine, KEY)
    daily = schedule_ai(engine, KEY, recurrenceType="daily")
    fire(engine, 61_000 + 2 * 86_400_000 + 3_600_000)
    stale = {entry["uuid"]: entry for entry in SCRIPT.stale}
    assert stale[once["uuid"]]["action"] == "expired" and stale[once["uuid"]]["skipped_count"] == 1
    assert stale[daily["uuid"]]["action"] == "fast_forwarded" and stale[daily["uuid"]]["skipped_count"] == 3
    assert stale[daily["uuid"]]["next_send_at"] == "2030-01-03T00:01:00.000Z"
    assert stale[once["uuid"]]["row_next_send_at"] == "2029-12-31T00:01:00.000Z"  # the occurrence it skipped
    assert SCRIPT.before_calls == 0 and engine.llm.requests == []


def test_total_timeout_is_checked_before_each_round(agentic):
    engine = agentic

    def output(ctx):
        engine.ctx.clock.current_ms += 5_000  # the hook is slow
        return {"decision": "continue", "next_history": ctx.messages}

    SCRIPT.before = lambda ctx: {"messages": [{"role": "user", "content": "x"}], "total_timeout_ms": 9_000}
    SCRIPT.output = output
    created = schedule_ai(engine, KEY)
    fire(engine)
    assert len(engine.llm.requests) == 2
    assert task(engine, created["uuid"])["lastError"]["reason"].startswith("AGENTIC_TOTAL_TIMEOUT")


def test_a_fire_never_outlives_its_invocation(agentic, monkeypatch):
    from amsg.engine import run_task

    engine = agentic
    build = run_task.delivery_env

    def nearly_out_of_time(ctx, **kwargs):
        env = build(ctx, **kwargs)
        env.llm_timeout_s = lambda: 1.0  # what the env reports when the invocation has ~10 s left
        return env

    monkeypatch.setattr(run_task, "delivery_env", nearly_out_of_time)
    SCRIPT.before = lambda ctx: [{"role": "user", "content": "x"}]
    created = schedule_ai(engine, KEY)
    fire(engine)
    assert engine.llm.requests == []
    detail = task(engine, created["uuid"])
    assert detail["retryCount"] == 1 and detail["lastError"]["reason"].startswith("AGENTIC_TOTAL_TIMEOUT")


def test_tool_failures_become_tool_messages(agentic):
    engine = agentic
    engine.llm.reply_tool_calls(("c1", "broken", {}))
    engine.llm.reply_content("recovered")

    def tools_hook(calls, ctx):
        raise ValueError("disk on fire")

    SCRIPT.before = lambda ctx: [{"role": "user", "content": "x"}]
    SCRIPT.output = lambda ctx: (
        {"decision": "tool-request", "tool_calls": ctx.llm_response["choices"][0]["message"]["tool_calls"]}
        if ctx.iteration == 0
        else {"decision": "finish", "push_payloads": [{"message": ctx.llm_output_text}]}
    )
    SCRIPT.tools = tools_hook
    schedule_ai(engine, KEY)
    fire(engine)
    tool_message = engine.llm.requests[1].json["messages"][-1]
    assert tool_message == {"tool_call_id": "c1", "role": "tool", "content": "Tool execution failed: disk on fire"}
    assert [p["message"] for p in engine.push.payloads()] == ["recovered"]


@pytest.mark.dynamo_store
def test_follow_ups_cancel_renew_results_and_state(agentic):
    engine = agentic
    api = engine.api
    other = schedule_ai(engine, KEY, firstSendTime="2030-01-05T00:00:00Z")
    renewable = schedule_ai(engine, KEY, firstSendTime="2030-01-05T00:00:00Z")
    assert (
        api.put_client_state([{"namespace": "companion", "key": "mood", "value": "sleepy", "updatedAt": T0_MS}]).status
        == 200
    )
    cred = {
        "credId": "chat-main",
        "value": {"apiUrl": "https://llm.example/v1", "apiKey": "sk-stored-1", "primaryModel": "m2"},
    }
    assert api.put_credentials([cred]).status == 200
    results: dict = {}

    def before(ctx):
        results["mood"] = ctx.read_state("companion", "mood")
        results["cred"] = ctx.resolve_llm_credential("chat-main")
        results["no_cred"] = ctx.resolve_llm_credential("missing")
        results["all"] = ctx.read_state("companion")
        return [{"role": "user", "content": "x"}]

    def output(ctx):
        results["follow"] = ctx.schedule_task({"firstSendTime": "2030-01-02T00:00:00Z", "metadata": {"followUp": 1}})
        results["early"] = _raises(lambda: ctx.schedule_task({"firstSendTime": "2029-12-31T00:01:30Z"}))
        results["second"] = ctx.schedule_task(
            {"firstSendTime": "2030-01-03T00:00:00Z", "messageType": "fixed", "userMessage": "ping"}
        )
        results["quota"] = _raises(lambda: ctx.schedule_task({"firstSendTime": "2030-01-03T00:00:00Z"}))
        results["instant"] = None
        results["cancel"] = ctx.cancel_task(other["uuid"])
        results["cancel_again"] = ctx.cancel_task(other["uuid"])
        results["cancel_self"] = _raises(lambda: ctx.cancel_task(ctx.task_uuid))
        results["renew"] = ctx.renew_task(renewable["uuid"], "2030-01-06T00:00:00Z")
        results["renew_missing"] = ctx.renew_task(other["uuid"], "2030-01-04T00:00:00Z")
        results["result"] = ctx.emit_result({"resultKind": "diary", "text": "wrote a diary"})
        results["quiet"] = ctx.emit_result({"resultKind": "note", "notification": {"show": False}})
        results["write"] = ctx.write_state("companion", "mood", "cheerful")
        return {"decision": "finish", "push_payloads": [{"message": "done"}]}

    SCRIPT.before, SCRIPT.output = before, output
    created = schedule_ai(engine, KEY)
    fire(engine)

    assert results["mood"] == "sleepy" and results["all"][0]["key"] == "mood"
    assert results["cred"] == {"apiUrl": "https://llm.example/v1", "apiKey": "sk-stored-1", "primaryModel": "m2"}
    assert results["no_cred"] is None
    follow = results["follow"]
    assert follow["created"] is True and follow["nextSendAt"] == "2030-01-02T00:00:00.000Z"
    detail = task(engine, follow["uuid"])
    assert detail["messageType"] == "prompted" and detail["metadata"] == {"followUp": 1}
    assert detail["credRefs"] is None and detail["status"] == "pending"
    assert "ValueError" in results["early"] and "ValueError" in results["quota"]
    assert results["second"]["created"] is True and task(engine, results["second"]["uuid"])["messageType"] == "fixed"
    assert results["cancel"] == {"cancelled": True} and results["cancel_again"] == {"cancelled": False}
    assert task(engine, other["uuid"]) is None and "ValueError" in results["cancel_self"]
    assert results["renew"] == {"renewed": True, "uuid": renewable["uuid"], "nextSendAt": "2030-01-06T00:00:00.000Z"}
    assert task(engine, renewable["uuid"])["nextSendAt"] == "2030-01-06T00:00:00.000Z"
    # a later occurrence moves the expiry of the one-shot's uuid registry entry with it (docs/decisions.md, 47)
    entry = engine.ctx.tasks.db.get(engine.ctx.tasks.space.uuid_registry_key(renewable["uuid"]))
    assert int(entry["ttl"]) == parse_iso_ms("2030-01-06T00:00:00Z") // 1000 + REGISTRY_TTL_S
    assert results["renew_missing"] == {"renewed": False, "reason": "not_found"}
    result_id = f"msg_task_{created['id']}@{FIRST_MS}_result_0"
    assert results["result"] == {"messageId": result_id, "pushed": True}
    assert results["quiet"]["pushed"] is False
    assert results["write"] == {"upserted": 1, "skipped": 0, "deleted": 0}
    assert api.get_client_state("companion").data["entries"][0]["value"] == "cheerful"

    pushes = engine.push.payloads()
    assert [p.get("messageKind") for p in pushes] == ["result", None]
    assert pushes[0]["resultKind"] == "diary" and pushes[0]["notification"] == {"show": "always"}
    assert pushes[0]["taskUuid"] == created["uuid"]
    outbox_ids = [entry["messageId"] for entry in api.outbox_sync()[0]]
    assert result_id in outbox_ids and f"msg_task_{created['id']}@{FIRST_MS}_result_1" in outbox_ids


def test_a_rerun_of_the_same_occurrence_creates_no_second_follow_up_and_no_second_result(agentic):
    engine = agentic
    created_uuids: list[str] = []

    def output(ctx):
        created_uuids.append(ctx.schedule_task({"firstSendTime": "2030-01-02T00:00:00Z"})["uuid"])
        ctx.emit_result({"resultKind": "diary"})
        if len(created_uuids) == 1:
            raise RuntimeError("transient failure after the side effects")
        return {"decision": "finish", "push_payloads": [{"message": "ok"}]}

    SCRIPT.before = lambda ctx: [{"role": "user", "content": "x"}]
    SCRIPT.output = output
    created = schedule_ai(engine, KEY)
    fire(engine)
    assert task(engine, created["uuid"])["retryCount"] == 1
    fire(engine, 61_000 + 120_000)
    assert created_uuids[0] == created_uuids[1]
    listed = [t for t in engine.api.list_messages().data["tasks"] if t["uuid"] == created_uuids[0]]
    assert len(listed) == 1
    kinds = [p.get("messageKind") for p in engine.push.payloads()]
    assert kinds == ["result", None]  # the result was pushed once, by the first run


def test_instant_path_runs_the_hooks_but_cannot_defer(agentic):
    engine = agentic
    engine.llm.reply_content("现在就说。")
    SCRIPT.before = lambda ctx: [{"role": "user", "content": "now"}]
    instant = {"messageType": "instant", "firstSendTime": "2029-12-31T00:00:30Z"}
    resp = engine.api.schedule(
        {
            "contactName": "Rei",
            "completePrompt": "x",
            "apiUrl": engine.llm.base_url,
            "apiKey": KEY,
            "primaryModel": "m",
            **instant,
        }
    )
    assert resp.status == 200 and resp.data["status"] == "sent", resp.text
    assert [p["message"] for p in engine.push.payloads()] == ["现在就说。"]
    assert [s["status"] for s in SCRIPT.settled] == ["sent"]

    SCRIPT.before = lambda ctx: {"defer": {"after_ms": 60_000}}
    resp = engine.api.schedule(
        {
            "contactName": "Rei",
            "completePrompt": "x",
            "apiUrl": engine.llm.base_url,
            "apiKey": KEY,
            "primaryModel": "m",
            **instant,
        }
    )
    assert resp.status == 500 and resp.body["error"]["details"]["code"] == "PROCESSING_ERROR"
    assert resp.body["error"]["details"]["message"].startswith("AGENTIC_DEFER_UNSUPPORTED")
    assert SCRIPT.settled[-1]["status"] == "failed"
    assert [s for s in engine.sleeps if s] == [1.0, 2.0]  # retried twice, 1 s then 2 s apart, then failed


def test_a_failing_tick_is_reported_to_on_error(agentic, monkeypatch):
    engine = agentic

    def broken(*args, **kwargs):
        raise RuntimeError(f"table unreachable with {KEY}")

    monkeypatch.setattr(engine.ctx.claims, "due_candidates", broken)
    with pytest.raises(RuntimeError):
        engine.harness.tick()
    (cause,) = SCRIPT.errors
    assert cause["stage"] == "tick" and cause["name"] == "RuntimeError" and KEY not in cause["message"]


def test_hooks_load_all_exports_and_capabilities_follow(agentic):
    hooks = load_hooks("tests.support.hooks_agentic")
    assert hooks.agentic and hooks.execute_tool_calls and hooks.on_stale_skip and hooks.serialize_by
    features = agentic.api.capabilities().body["features"]
    for name in (
        "agentic-hooks", "agentic-fire-tools", "after-send-hook", "fire-settled-hook", "emit-result",
        "before-fire-defer", "recurring-stale-skip-hook", "agentic-cancel-renew-task", "max-generation-retries",
    ):  # fmt: skip
        assert name in features


def test_capabilities_omit_hook_features_without_a_hooks_module(engine):
    features = engine.api.capabilities().body["features"]
    assert not [name for name in features if name.startswith("agentic") or "hook" in name]


def _raises(call) -> str:
    try:
        call()
    except Exception as exc:
        return type(exc).__name__
    return "no error"


@pytest.mark.dynamo_store
def test_agentic_fires_count_against_caps_and_defer_when_a_cap_fills_mid_fire(agentic):
    """The built-in delivery policy composes with the host's hooks: an agentic finish push is counted in its
    send claim; when the cap filled while the hook ran, the claim refuses, the fire is deferred (no retry
    consumed) and the later run pushes the outboxed batch without calling the LLM or any hook again."""
    from amsg.adapters.dynamo.delivery_policy import cap_charge_action
    from amsg.ports import CapCharge

    engine = agentic
    policy = {"caps": [{"scope": "user", "max": 1, "windowMinutes": 60}]}
    assert engine.api.put_delivery_policy(policy).status == 200
    created = schedule_ai(engine, KEY)
    engine.llm.reply_content("晚上好。")
    hour = T0_MS - T0_MS % 3_600_000

    def before(ctx):  # another fire takes the last slot while this one is being generated
        charge = CapCharge(f"u#60#{hour}", 1, hour + 3_600_000, "someone-else@1")
        engine.ctx.policies.db.transact([cap_charge_action(engine.ctx.policies.space, engine.api.user_id, charge)])
        return [{"role": "user", "content": "x"}]

    SCRIPT.before = before
    fire(engine)
    assert engine.push.payloads() == []
    view = task(engine, created["uuid"])
    assert view["deferredUntil"] == "2029-12-31T01:00:00.000Z" and view["retryCount"] == 0
    assert SCRIPT.before_calls == 1 and len(engine.llm.requests) == 1
    SCRIPT.before = lambda ctx: pytest.fail("a committed batch never calls the hooks again")
    fire(engine, 3_600_000 + 1_000)
    assert [p["message"] for p in engine.push.payloads()] == ["晚上好。"]
    assert len(engine.llm.requests) == 1
    counter = engine.ctx.policies.db.get({"PK": f"U#{engine.api.user_id}", "SK": f"CAP#u#60#{hour + 3_600_000}"})
    assert counter["occ"] == {f"{created['uuid']}@{FIRST_MS}"}
