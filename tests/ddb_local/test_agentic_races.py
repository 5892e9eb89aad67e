"""Agentic fires stay exactly-once under racing ticks, duplicated SQS deliveries and a consumer killed
mid-chain, decided by DynamoDB Local's conditional writes and transactions: every hook push, every result push
and every follow-up task exists once; a state write from a run that lost its claim never lands."""

from __future__ import annotations

import json
import threading
import uuid
from collections import Counter

import pytest
from amsg.crypto import compact_json, encrypt_for_storage
from amsg.engine.messages import parse_task_message
from amsg.engine.run_task import run_message
from amsg.engine.tick import run_tick
from amsg.ports import LlmReply, NewTask
from amsg.timeutil import iso_from_ms

from tests.support import hooks_agentic
from tests.support.ddb_engine import T0_MS, Killed, MemoryQueue, RecordingPushSender, ddb_context, race, with_fakes
from tests.support.hooks_agentic import SCRIPT

pytestmark = pytest.mark.ddb_local
DUE_MS = T0_MS + 60_000
FOLLOW_UP_AT = iso_from_ms(T0_MS + 86_400_000)


class ScriptedLlm:
    """LlmClient port fake: the first round asks for a tool, the next answers (per conversation)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls = 0

    def complete(self, request, *, timeout_s: float) -> LlmReply:
        with self.lock:
            self.calls += 1
        asked = any(m.get("role") == "tool" for m in request.body["messages"])
        if asked:
            message = {"role": "assistant", "content": "答案是晴天。"}
        else:
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}],
            }
        response = {"choices": [{"message": message}], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}
        return LlmReply(content=message["content"] or "", reasoning=None, raw_status=200, response=response)


@pytest.fixture
def world(ddb_local_endpoint, ddb_local_table):
    hooks_agentic.reset()
    ctx = ddb_context(ddb_local_endpoint, ddb_local_table, AMSG_HOOKS_MODULE="tests.support.hooks_agentic")
    sender, queue, llm = RecordingPushSender(), MemoryQueue(), ScriptedLlm()
    with_fakes(ctx, sender, queue, llm)

    def output(hctx):
        message = hctx.llm_response["choices"][0]["message"]
        if message.get("tool_calls"):
            return {"decision": "tool-request", "tool_calls": message["tool_calls"]}
        hctx.schedule_task({"firstSendTime": FOLLOW_UP_AT})
        hctx.emit_result({"resultKind": "diary", "text": "今天很好"})
        return {
            "decision": "finish",
            "push_payloads": [
                {"messageKind": "content", "message": "第一句"},
                {"messageKind": "content", "message": "第二句"},
            ],
        }

    SCRIPT.before = lambda hctx: [{"role": "user", "content": "天气如何"}]
    SCRIPT.output = output
    SCRIPT.tools = lambda calls, hctx: [{"role": "tool", "tool_call_id": c["id"], "content": "sunny"} for c in calls]
    yield ctx, sender, queue, llm
    hooks_agentic.reset()


def seed(ctx, users: int, per_user: int) -> list[tuple[str, str]]:
    tasks = []
    for _ in range(users):
        user = str(uuid.uuid4())
        key = ctx.user_key(user)
        subscription = compact_json({"endpoint": "https://push.invalid/x", "keys": {}})
        ctx.subscriptions.put_push_subscription(user, encrypt_for_storage(subscription, key), 1)
        for _ in range(per_user):
            task_uuid = str(uuid.uuid4())
            payload = {
                "contactName": "Rei",
                "messageType": "prompted",
                "completePrompt": "hi",
                "apiUrl": "http://127.0.0.1:9/v1",
                "apiKey": "sk-never-shown-to-hooks",
                "primaryModel": "m",
                "recurrenceType": "none",
                "metadata": {},
            }
            encrypted = encrypt_for_storage(compact_json(payload), key)
            ctx.tasks.create_task(NewTask(user, task_uuid, encrypted, "prompted", DUE_MS, T0_MS))
            tasks.append((user, task_uuid))
    return tasks


def follow_ups(ctx, tasks: list[tuple[str, str]]) -> Counter[str]:
    """Follow-up tasks per user (every task of the user that was not seeded)."""
    seeded = {task_uuid for _, task_uuid in tasks}
    counts: Counter[str] = Counter()
    for user in {user for user, _ in tasks}:
        for row in ctx.tasks.list_tasks(user):
            if row.uuid not in seeded:
                assert row.next_send_at_ms == T0_MS + 86_400_000
                counts[user] += 1
    return counts


def test_racing_ticks_and_duplicated_deliveries_fire_every_agentic_task_exactly_once(world):
    ctx, sender, queue, llm = world
    tasks = seed(ctx, users=6, per_user=5)
    ctx.clock.current_ms = DUE_MS + 1_000
    race(ctx, queue, ticks=2, consumers=2, duplicate=True)

    counts = sender.counts()
    assert len(counts) == 3 * len(tasks)  # two hook pushes and one result per task
    assert set(counts.values()) == {1}
    assert sorted(Counter(p["messageKind"] for p in sender.sent).items()) == [("content", 60), ("result", 30)]
    assert follow_ups(ctx, tasks) == Counter({user: 5 for user in {u for u, _ in tasks}})
    assert SCRIPT.before_calls == len(tasks) == len(SCRIPT.settled)
    assert {s["status"] for s in SCRIPT.settled} == {"sent"}
    assert llm.calls == 2 * len(tasks)
    assert all(ctx.tasks.find_task(task_uuid) is None for _, task_uuid in tasks)


@pytest.mark.parametrize("kill", ["in_hook_after_side_effects", "before_second_push", "after_result_push"])
def test_a_consumer_killed_mid_chain_is_taken_over_without_doubling_anything(world, kill):
    ctx, sender, queue, _ = world
    ((user, task_uuid),) = seed(ctx, users=1, per_user=1)
    task_id = ctx.tasks.find_task(task_uuid).id
    base = f"msg_task_{task_id}@{DUE_MS}"
    runs = {"n": 0}
    original = SCRIPT.output

    def output(hctx):
        decision = original(hctx)
        if kill == "in_hook_after_side_effects" and decision["decision"] == "finish" and runs["n"] == 0:
            runs["n"] += 1
            raise Killed("sandbox died inside the hook")
        return decision

    SCRIPT.output = output
    if kill == "before_second_push":
        sender.kill_before.add(f"{base}_hook_1")
    if kill == "after_result_push":
        sender.kill_after.add(f"{base}_result_0")

    ctx.clock.current_ms = DUE_MS + 1_000
    assert run_tick(ctx)["enqueuedTasks"] == 1
    message = parse_task_message(json.dumps(queue.items.get_nowait()))
    with pytest.raises(Killed):
        run_message(ctx, message, remaining_ms=lambda: 100_000, owner="doomed")

    assert run_tick(ctx)["claimedTasks"] == 0  # the dead worker's lease still holds
    ctx.clock.advance(ctx.settings.run_lease_ms + 1_000)
    assert run_tick(ctx)["claimedTasks"] == 1
    assert run_message(ctx, message, remaining_ms=lambda: 100_000, owner="late")["skipped"] == "claim_not_current"
    takeover = parse_task_message(json.dumps(queue.items.get_nowait()))
    result = run_message(ctx, takeover, remaining_ms=lambda: 100_000, owner="takeover")
    assert result["successCount"] == 1

    counts = sender.counts()
    assert set(counts.values()) == {1}, counts
    sent = {key.split("/", 1)[1] for key in counts}
    expected = {f"{base}_hook_0", f"{base}_hook_1", f"{base}_result_0"}
    if kill == "before_second_push":
        expected.discard(f"{base}_hook_1")  # claimed by the dead worker: left in the outbox for the client
    assert sent == expected
    assert follow_ups(ctx, [(user, task_uuid)]) == Counter({user: 1})
    outbox = {row.message_id for row in ctx.outbox.list_unacked(user, 0, 50, ctx.now_ms())}
    assert {f"{base}_hook_0", f"{base}_hook_1", f"{base}_result_0"} <= outbox  # nothing lost
    assert ctx.tasks.find_task(task_uuid) is None
    # a killed run never settles; every run that lived settled exactly once
    assert len(SCRIPT.settled) == (0 if kill == "before_second_push" else 1)


def test_state_written_by_a_run_that_lost_its_claim_never_lands(world):
    ctx, sender, queue, _ = world
    ((user, task_uuid),) = seed(ctx, users=1, per_user=1)
    outcome: dict = {}

    def before(hctx):
        hctx.write_state("companion", "seen", "before")  # our claim is current: lands
        ctx.tasks.delete_task(user, task_uuid)  # the user cancels the task while it fires
        try:
            hctx.write_state("companion", "seen", "after")
        except Exception as exc:
            outcome["error"] = type(exc).__name__
            raise
        return [{"role": "user", "content": "x"}]

    SCRIPT.before = before
    ctx.clock.current_ms = DUE_MS + 1_000
    run_tick(ctx)
    message = parse_task_message(json.dumps(queue.items.get_nowait()))
    result = run_message(ctx, message, remaining_ms=lambda: 100_000, owner="c")
    assert outcome["error"] == "Cancelled"
    assert result["details"]["cancelledTasks"][0]["status"] == "cancelled_mid_delivery"
    rows = ctx.client_state.get_namespace(user, "companion")
    from amsg.crypto import decrypt_from_storage

    assert [decrypt_from_storage(row.value, ctx.user_key(user)) for row in rows] == ["before"]
    assert [s["status"] for s in SCRIPT.settled] == ["cancelled"] and sender.sent == []
