"""The instant path never pushes once its answer can no longer be a success (docs/delivery.md): a slow step that
eats the request's time leaves the pushes unsent, the answer is 500 ``MESSAGE_SEND_FAILED``, and the task is
left with exactly one retry, which the next tick delivers once. Slowness is simulated on the injected clock."""

from __future__ import annotations

from typing import Any

import pytest
from amsg.ports import LlmReply, LlmRequest

from tests.conftest import T0_MS
from tests.support.inprocess import LambdaContext

pytestmark = pytest.mark.memory_store  # the engine on the in-memory fakes under `make unit`

FIRST = "2029-12-31T00:01:00.000Z"  # T0 + 60 s: an instant message still names a future time


class SlowLlm:
    """Answers after ``delay_ms`` on the context's clock."""

    def __init__(self, clock: Any, delay_ms: int, content: str) -> None:
        self.clock, self.delay_ms, self.content = clock, delay_ms, content
        self.calls = 0

    def complete(self, request: LlmRequest, *, timeout_s: float) -> LlmReply:
        self.calls += 1
        self.clock.current_ms += self.delay_ms
        return LlmReply(content=self.content, reasoning=None, raw_status=200)


class SlowPushes:
    """The real sender, each push taking ``delay_ms`` on the context's clock."""

    def __init__(self, inner: Any, clock: Any, delay_ms: int) -> None:
        self.inner, self.clock, self.delay_ms = inner, clock, delay_ms
        self.timeouts: list[float | None] = []

    def send(self, subscription: Any, payload: bytes | str, **kwargs: Any) -> int:
        self.timeouts.append(kwargs.get("timeout_s"))
        status = self.inner.send(subscription, payload, **kwargs)
        self.clock.current_ms += self.delay_ms
        return status


def instant(engine: Any, **fields: Any) -> Any:
    payload = {"contactName": "Rei", "messageType": "instant", "userMessage": "一。二。三。", "firstSendTime": FIRST}
    return engine.api.schedule({**payload, **fields})


def ai_fields(engine: Any) -> dict[str, Any]:
    return {"userMessage": None, "completePrompt": "x", "apiUrl": engine.llm.base_url, "apiKey": "sk-slow-0123456789"}


def task_of(engine: Any, task_uuid: str) -> dict[str, Any]:
    return engine.api.get_message(task_uuid).data["task"]


def assert_left_for_one_retry(engine: Any, resp: Any) -> str:
    assert resp.status == 500 and resp.code == "MESSAGE_SEND_FAILED", resp.text
    details = resp.body["error"]["details"]
    assert details["code"] == "PROCESSING_ERROR" and details["message"].startswith("INSTANT_DEADLINE_EXCEEDED")
    assert "permanent" not in details
    uuid = next(t["uuid"] for t in engine.api.list_messages().data["tasks"])
    task = task_of(engine, uuid)
    limit = engine.ctx.settings.max_delivery_retries
    assert task["status"] == "pending" and task["retryCount"] == limit  # one retry, then final
    assert task["lastError"]["reason"].startswith("INSTANT_DEADLINE_EXCEEDED")
    return uuid


def test_a_slow_llm_sends_nothing_and_the_retry_delivers_once(engine):
    slow = SlowLlm(engine.ctx.clock, 28_000, "一。二。")  # past the 27 s deadline before the first push
    engine.ctx.delivery.__dict__["llm"] = slow
    resp = instant(engine, **ai_fields(engine), primaryModel="m")
    uuid = assert_left_for_one_retry(engine, resp)
    assert engine.push.payloads() == []
    engine.harness.tick_and_drain()
    assert [p["message"] for p in engine.push.payloads()] == ["一。", "二。"]
    assert slow.calls == 1  # the retry sends the batch already in the outbox: no second generation
    assert engine.api.get_message(uuid).code == "TASK_NOT_FOUND"  # delivered and deleted
    engine.harness.tick_and_drain()
    assert len(engine.push.payloads()) == 2  # and nothing twice


def test_a_slow_push_stops_the_next_one_and_the_retry_sends_only_the_rest(engine, monkeypatch):
    original = engine.ctx.delivery.make_push_sender
    senders: list[SlowPushes] = []

    def slow_sender() -> SlowPushes:
        senders.append(SlowPushes(original(), engine.ctx.clock, 15_000))
        return senders[-1]

    monkeypatch.setattr(engine.ctx.delivery, "make_push_sender", slow_sender)
    resp = instant(engine)
    uuid = assert_left_for_one_retry(engine, resp)
    assert [p["message"] for p in engine.push.payloads()] == ["一。", "二。"]  # the third would come too late
    assert senders[0].timeouts[0] == pytest.approx(27.0)  # a push never outlives the answer
    engine.harness.tick_and_drain()
    assert [p["message"] for p in engine.push.payloads()] == ["一。", "二。", "三。"]
    assert engine.api.get_message(uuid).code == "TASK_NOT_FOUND"


def test_the_lambdas_remaining_time_bounds_the_deadline(engine, monkeypatch):
    monkeypatch.setattr(LambdaContext, "get_remaining_time_in_millis", lambda self: 1_500)  # under the margin
    resp = instant(engine, userMessage="马上到。")
    assert_left_for_one_retry(engine, resp)
    assert engine.push.payloads() == []
    monkeypatch.undo()
    engine.harness.tick_and_drain()
    assert [p["message"] for p in engine.push.payloads()] == ["马上到。"]


def test_the_one_retry_is_final_when_it_fails_too(engine, monkeypatch):
    monkeypatch.setattr(LambdaContext, "get_remaining_time_in_millis", lambda self: 0)
    uuid = assert_left_for_one_retry(engine, instant(engine, userMessage="马上到。"))
    monkeypatch.undo()
    engine.push.set_status(engine.subscription.endpoint_id, 500)
    engine.harness.tick_and_drain()
    assert engine.ctx.tasks.get_task(engine.api.user_id, uuid).status == "failed"
    assert engine.api.get_message(uuid).status == 409 and engine.push.payloads() == []
    engine.ctx.clock.current_ms = T0_MS + 3_600_000
    assert engine.harness.tick()["claimedTasks"] == 0


def test_with_time_enough_the_instant_answer_is_unchanged(engine):
    resp = instant(engine)
    assert resp.status == 200 and resp.data["messagesSent"] == 3
    assert [p["message"] for p in engine.push.payloads()] == ["一。", "二。", "三。"]
