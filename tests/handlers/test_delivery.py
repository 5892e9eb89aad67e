"""The delivery chain through the real handlers on moto: schedule (API) → tick (claims, enqueues) → SQS →
run_task (adopts the claim, delivers) → Web Push to a loopback push service that decrypts every push."""

from __future__ import annotations

import re
import threading
from collections import Counter

import pytest

from tests.conftest import T0_MS, moto_table_resource
from tests.support import scenario

pytestmark = pytest.mark.memory_store

ISO_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")
FIRST = "2029-12-31T00:01:00.000Z"  # T0 + 60 s
FIRST_MS = T0_MS + 60_000


def schedule(env, **fields):
    return scenario.schedule(env, message="早上好。今天也要加油！", **fields)


def schedule_ai(env, api_key: str, **fields):
    """An LLM task against the loopback fake (prompted unless said otherwise)."""
    ai = {
        "messageType": "prompted",
        "userMessage": None,
        "completePrompt": "x",
        "apiUrl": env.llm.base_url,
        "apiKey": api_key,
        "primaryModel": "m",
    }
    return schedule(env, **{**ai, **fields})


def due(env, ms: int = 61_000):
    env.ctx.clock.current_ms = T0_MS + ms


def test_fixed_message_is_pushed_once_with_the_reference_payload(engine):
    created = schedule(engine, metadata={"charId": "c1"}, avatarUrl="https://img.example/a.png")
    summary = engine.harness.tick()
    assert summary["claimedTasks"] == 0  # not due yet
    due(engine)
    summary = engine.harness.tick()
    assert summary["claimedTasks"] == 1 and summary["enqueuedTasks"] == 1
    engine.harness.drain()
    payloads = engine.push.payloads()
    assert [p["message"] for p in payloads] == ["早上好。", "今天也要加油！"]
    first = payloads[0]
    for key in ("timestamp",):
        assert ISO_RE.match(first.pop(key))
    assert first == {
        "messageKind": "content",
        "messageType": "fixed",
        "source": "scheduled",
        "messageId": f"msg_task_{created['id']}@{FIRST_MS}_0",
        "sessionId": f"sess_task_{created['id']}@{FIRST_MS}",
        "message": "早上好。",
        "title": "来自 Rei",
        "contactName": "Rei",
        "avatarUrl": "https://img.example/a.png",
        "messageSubtype": "chat",
        "messageIndex": 1,
        "totalMessages": 2,
        "metadata": {"charId": "c1"},
        "taskId": created["id"],
        "taskUuid": created["uuid"],
        "recurrenceType": "none",
        "occurrenceMs": FIRST_MS,
    }
    received = engine.push.received
    assert all(r.vapid.ok for r in received)
    assert {r.headers.get("ttl") for r in received} == {"2419200"}
    # one-shot success deletes the task; another tick finds nothing
    assert engine.api.get_message(created["uuid"]).code == "TASK_NOT_FOUND"
    assert engine.harness.tick()["claimedTasks"] == 0


def test_redelivered_sqs_message_sends_nothing_twice(engine):
    schedule(engine, recurrenceType="daily")
    due(engine)
    engine.harness.tick()
    messages = engine.harness.receive()
    assert len(messages) == 1
    engine.harness.run(messages)
    engine.harness.run(messages)  # SQS at-least-once: the same message again
    assert len(engine.push.payloads()) == 2  # two segments, once each


def test_a_batch_reads_each_record_body_once(engine, monkeypatch):
    """The batch's grouping by user and the record handler share one parse of each body; a malformed record
    is still dropped (and acknowledged) while the others are delivered."""
    from amsg import jsonio

    for _ in range(2):
        schedule(engine)
    due(engine)
    engine.harness.tick()
    messages = engine.harness.receive()
    assert len(messages) == 2
    malformed = {**messages[0], "MessageId": "poison", "Body": '{"userId": 1}'}
    batch = [*messages, malformed]
    bodies = {message["Body"] for message in batch}
    parsed = []
    real = jsonio.loads
    monkeypatch.setattr(
        jsonio, "loads", lambda text, **kw: (text in bodies and parsed.append(text)) or real(text, **kw)
    )
    result = engine.harness.run(batch)
    assert result == {"batchItemFailures": []}
    assert sorted(parsed) == sorted(message["Body"] for message in batch)
    assert len(engine.push.payloads()) == 4  # two tasks, two segments each


def test_the_llm_client_is_built_only_when_a_delivery_needs_it(engine):
    """A sandbox that delivers fixed messages never builds the LLM's HTTP client (cold-start cost)."""
    schedule(engine)
    due(engine)
    engine.harness.tick_and_drain()
    assert len(engine.push.payloads()) == 2
    assert "llm" not in vars(engine.ctx.delivery)  # the cached client was never asked for
    engine.llm.reply_content("嗨")
    schedule_ai(engine, "sk-test-key-123456789", firstSendTime="2029-12-31T00:02:00.000Z")
    due(engine, 121_000)
    engine.harness.tick_and_drain()
    assert "llm" in vars(engine.ctx.delivery) and engine.push.payloads()[-1]["message"] == "嗨"


def test_prompted_message_uses_the_llm_and_keeps_reasoning_in_the_outbox(engine):
    engine.llm.reply_reasoning("你好！我在想你。", "用户早上会醒来")
    schedule(
        engine,
        messageType="prompted",
        userMessage=None,
        completePrompt="say hi",
        apiUrl=engine.llm.base_url,
        apiKey="sk-test-key-123456789",
        primaryModel="gpt-test",
        llmExtraBody={"top_p": 0.5},
    )
    due(engine)
    engine.harness.tick_and_drain()
    request = engine.llm.last_request
    assert request.headers["authorization"] == "Bearer sk-test-key-123456789"
    assert request.json == {
        "top_p": 0.5,
        "model": "gpt-test",
        "messages": [{"role": "user", "content": "say hi"}],
        "temperature": 0.8,
    }
    pushed = engine.push.payloads()
    assert [p["messageKind"] for p in pushed] == ["content", "content"]  # reasoning is outbox-only
    assert [p["message"] for p in pushed] == ["你好！", "我在想你。"]


def test_push_service_5xx_retries_with_backoff_and_lasterror(engine):
    engine.push.set_status(engine.subscription.endpoint_id, 500, 201)
    created = schedule(engine, userMessage="hello")
    due(engine)
    engine.harness.tick_and_drain()
    listed = engine.api.list_messages().data["tasks"][0]
    assert listed["retryCount"] == 1
    assert listed["lastError"]["pushStatus"] == 500
    assert listed["lastError"]["occurrence"] == FIRST
    assert engine.harness.tick()["claimedTasks"] == 0  # back-off: not before +2 min
    due(engine, 61_000 + 120_000)
    engine.harness.tick_and_drain()
    assert [p["message"] for p in engine.push.payloads()] == ["hello"]
    assert engine.api.get_message(created["uuid"]).code == "TASK_NOT_FOUND"


def test_gone_subscription_is_a_permanent_failure(engine):
    engine.push.set_status(engine.subscription.endpoint_id, 410)
    created = schedule(engine, userMessage="hello")
    due(engine)
    engine.harness.tick_and_drain()
    resp = engine.api.get_message(created["uuid"])
    assert resp.status == 409 and resp.code == "TASK_ALREADY_COMPLETED"
    details = resp.body["error"]["details"]
    assert details["status"] == "failed"
    assert details["lastError"]["pushStatus"] == 410


def test_llm_auth_error_is_permanent_with_code(engine):
    engine.llm.reply_error(401, "Incorrect API key provided: sk-abcdefghijklmnopqrstuvwxyz")
    created = schedule_ai(engine, "sk-abcdefghijklmnopqrstuvwxyz", messageType="auto")
    due(engine)
    engine.harness.tick_and_drain()
    details = engine.api.get_message(created["uuid"]).body["error"]["details"]
    assert details["lastError"]["errorCode"] == "LLM_CALL_FAILED"
    assert "sk-abcdefghijklmnopqrstuvwxyz" not in details["lastError"]["reason"]
    assert engine.push.payloads() == []


def test_stale_one_shot_expires_and_recurring_fast_forwards(engine):
    one_shot = schedule(engine, userMessage="late")
    daily = schedule(engine, userMessage="daily", recurrenceType="daily")
    due(engine, 60_000 + 3 * 86_400_000 + 5 * 60_000)  # 3 days 5 minutes late
    summary = engine.harness.tick_and_drain()
    actions = {s["taskUuid"]: s for s in summary["details"]["staleTasks"]}
    assert actions[one_shot["uuid"]]["action"] == "expired"
    assert actions[daily["uuid"]]["action"] == "fast_forwarded"
    assert actions[daily["uuid"]]["skippedCount"] == 4
    assert engine.push.payloads() == []
    assert engine.api.get_message(one_shot["uuid"]).body["error"]["details"]["lastError"]["reason"] == "stale"
    task = engine.api.get_message(daily["uuid"]).data["task"]
    assert task["nextSendAt"] == "2030-01-04T00:01:00.000Z"
    assert task["lastError"]["reason"] == "stale"


def test_recurring_daily_across_dst_keeps_wall_clock(engine):
    # 08:00 America/New_York on 2029-03-10 (EST) → next day 08:00 EDT = 12:00Z
    from amsg.timeutil import parse_iso_ms

    first = parse_iso_ms("2029-03-10T13:00:00.000Z")
    engine.ctx.clock.current_ms = first - 3_600_000
    created = schedule(
        engine, firstSendTime="2029-03-10T13:00:00.000Z", recurrenceType="daily", tzId="america/new_york"
    )
    engine.ctx.clock.current_ms = first + 1000
    engine.harness.tick_and_drain()
    task = engine.api.get_message(created["uuid"]).data["task"]
    assert task["tzId"] == "America/New_York"
    assert task["nextSendAt"] == "2029-03-11T12:00:00.000Z"


def test_run_task_now_reasons(engine):
    from amsg.engine.run_now import run_task_now

    created = schedule(engine, userMessage="now")
    assert run_task_now(engine.ctx, "00000000-0000-4000-8000-000000000000") == {"ran": False, "reason": "not_found"}
    assert run_task_now(engine.ctx, created["uuid"]) == {"ran": False, "reason": "not_due", "nextSendAt": FIRST}
    due(engine)
    result = run_task_now(engine.ctx, created["uuid"])
    assert result["ran"] is True and result["summary"]["successCount"] == 1
    assert run_task_now(engine.ctx, created["uuid"]) == {"ran": False, "reason": "not_found"}


def test_instant_message_is_delivered_within_the_request(engine):
    resp = engine.api.schedule(
        {"contactName": "Rei", "messageType": "instant", "userMessage": "马上到。", "firstSendTime": FIRST}
    )
    assert resp.status == 200, resp.text
    assert resp.data["status"] == "sent" and resp.data["messagesSent"] == 1 and resp.data["retriesUsed"] == 0
    assert [p["source"] for p in engine.push.payloads()] == ["instant"]


def test_an_instant_message_cancelled_after_its_push_answers_sent(engine, monkeypatch):
    """The push left before the cancel: the answer says sent, not a cleanup failure (docs/decisions.md, 43)."""
    task_uuid = "6f1c2b9e-8d4a-4c3b-9e7f-0a1b2c3d4e5f"
    sender = engine.ctx.delivery.push_sender
    original = sender.send
    cancelled: list[bool] = []

    def send_then_cancel(*args, **kwargs):
        status = original(*args, **kwargs)
        cancelled.append(engine.ctx.tasks.delete_task(engine.api.user_id, task_uuid) is not None)
        return status

    monkeypatch.setattr(sender, "send", send_then_cancel)
    resp = engine.api.schedule(
        {
            "contactName": "Rei",
            "messageType": "instant",
            "userMessage": "马上到。",
            "firstSendTime": FIRST,
            "uuid": task_uuid,
        }
    )
    assert cancelled == [True]
    assert resp.status == 200, resp.text
    assert resp.data["status"] == "sent" and resp.data["messagesSent"] == 1
    assert len(engine.push.payloads()) == 1


@pytest.mark.parametrize(
    ("split_pattern", "text", "pushed"),
    [
        # as V8 splits (tests/unit/test_split_v8_differential.py): a variable-width look-behind ...
        ("(?<=[。！？]+)", "你好。再见！！好的", ["你好。", "再见！", "！", "好的"]),
        # ... a group whose empty iteration JavaScript refuses, and bounded fixed nesting
        ("(,|\\s{0,2})?", "a,b c", ["a,", "b ", "c"]),  # captured separators stay, even a space
        ("(?:。{2}){2}", "一。。。。二", ["一", "二"]),
    ],
)
def test_instant_message_splits_as_javascript_splits(engine, split_pattern, text, pushed):
    resp = engine.api.schedule(
        {
            "contactName": "Rei",
            "messageType": "instant",
            "userMessage": text,
            "firstSendTime": FIRST,
            "splitPattern": split_pattern,
        }
    )
    assert resp.status == 200, resp.text
    assert [p["message"] for p in engine.push.payloads()] == pushed


@pytest.mark.parametrize("status", [404, 413])
def test_instant_permanent_failure_answers_500_and_marks_failed(engine, status):
    engine.push.set_status(engine.subscription.endpoint_id, status)
    resp = engine.api.schedule(
        {"contactName": "Rei", "messageType": "instant", "userMessage": "x", "firstSendTime": FIRST}
    )
    assert resp.status == 500 and resp.code == "MESSAGE_SEND_FAILED"
    assert resp.body["error"]["details"]["code"] == "PROCESSING_ERROR"
    assert resp.body["error"]["details"]["permanent"] is True


def test_llm_timeout_is_retried_with_backoff_and_nothing_is_lost(engine, make_context):
    engine.ctx.settings = type(engine.ctx.settings)(**{**engine.ctx.settings.__dict__, "llm_timeout_ms": 1000})
    engine.llm.reply_delay(3.0, "too late")
    engine.llm.reply_content("准时到了。")
    created = schedule_ai(engine, "sk-timeout-0123456789")
    due(engine)
    engine.harness.tick_and_drain()
    task = engine.api.get_message(created["uuid"]).data["task"]
    assert task["retryCount"] == 1 and "timed out" in task["lastError"]["reason"]
    assert "errorCode" not in task["lastError"]  # timeouts are plain, retryable errors
    assert engine.push.payloads() == []
    assert engine.harness.tick()["claimedTasks"] == 0  # back-off honoured
    due(engine, 61_000 + 120_000)
    engine.harness.tick_and_drain()
    assert [p["message"] for p in engine.push.payloads()] == ["准时到了。"]


@pytest.fixture
def grouped(engine, make_context):
    """The engine with AMSG_HOOKS_MODULE set (serialize_by groups by metadata.group)."""
    settings = engine.ctx.settings
    engine.ctx.settings = type(settings)(**{**settings.__dict__, "hooks_module": "tests.support.hooks_serialize"})
    return engine


def test_serialize_by_delivers_one_task_per_group_the_earlier_first(grouped):
    from amsg.crypto import serialize_group_value

    engine = grouped
    first = schedule(engine, userMessage="A", metadata={"group": "char-1"}, firstSendTime="2029-12-31T00:01:00Z")
    second = schedule(engine, userMessage="B", metadata={"group": "char-1"}, firstSendTime="2029-12-31T00:01:30Z")
    other = schedule(engine, userMessage="C", metadata={"group": "char-2"})
    loose = schedule(engine, userMessage="D")
    broken = schedule(engine, userMessage="E", metadata={"explode": True})
    due(engine, 120_000)
    summary = engine.harness.tick()
    assert summary["claimedTasks"] == 3  # A, C, D: B waits behind A; E's hook failed
    assert summary["details"]["serializeSkippedTasks"] == 2
    row = engine.ctx.tasks.get_task(engine.api.user_id, first["uuid"])
    assert row.serialize_group == serialize_group_value(engine.api.user_key, "char-1")  # never the key in clear
    # A is still in flight (queued, not yet delivered): the next tick must not release B
    assert engine.harness.tick()["claimedTasks"] == 0
    engine.harness.drain()
    assert sorted(p["message"] for p in engine.push.payloads()) == ["A", "C", "D"]
    engine.harness.tick_and_drain()
    assert [p["message"] for p in engine.push.payloads()][-1] == "B"
    assert engine.api.get_message(broken["uuid"]).data["task"]["status"] == "pending"
    assert {second["uuid"], other["uuid"], loose["uuid"]}


def test_capabilities_report_serialize_by_only_with_the_hook(grouped):
    caps = grouped.api.capabilities().body["features"]
    assert "tick-serialize-by" in caps


def _with_settings(engine, **changes):
    settings = engine.ctx.settings
    engine.ctx.settings = type(settings)(**{**settings.__dict__, **changes})


def test_cancel_during_a_long_generation_stops_before_any_push(engine):
    _with_settings(engine, heartbeat_ms=100)
    engine.llm.reply_delay(1.0, "不该发出。")
    created = schedule_ai(engine, "sk-cancel-0123456789")
    due(engine)
    engine.harness.tick()
    messages = engine.harness.receive()
    canceller = threading.Timer(0.3, lambda: engine.api.cancel(created["uuid"]))
    canceller.start()
    engine.harness.run(messages)
    canceller.join()
    assert engine.push.payloads() == []
    assert engine.api.get_encrypted("/outbox").data["entries"] == []  # undelivered rows discarded


@pytest.mark.dynamo_store
def test_due_index_shards_are_all_read(engine):
    from tests.conftest import TABLE

    _with_settings(engine, due_shards=4)
    engine.ctx.tasks.due_shards = 4  # the store writes the shard; the tick reads every shard
    created = [schedule(engine, userMessage=f"s{i}") for i in range(12)]
    table = moto_table_resource(TABLE)
    shards = {
        table.get_item(Key={"PK": f"U#{engine.api.user_id}", "SK": f"T#{c['uuid']}"})["Item"]["due_pk"] for c in created
    }
    assert len(shards) > 1 and shards <= {f"DUE#{i}" for i in range(4)}
    due(engine)
    engine.harness.tick_and_drain()
    assert sorted(p["message"] for p in engine.push.payloads()) == sorted(f"s{i}" for i in range(12))


def test_cred_refs_are_resolved_at_fire_time(engine):
    stored_key = "sk-stored-credential-0123456789"
    resp = engine.api.put_credentials(
        [
            {
                "credId": "global/chat",
                "value": {"apiUrl": engine.llm.base_url, "apiKey": stored_key, "primaryModel": "m1"},
            }
        ]
    )
    assert resp.status == 200, resp.text
    engine.llm.reply_content("凭据有效。")
    schedule(engine, messageType="prompted", userMessage=None, completePrompt="x", credRefs={"chat": "global/chat"})
    due(engine)
    engine.harness.tick_and_drain()
    request = engine.llm.last_request
    assert request.headers["authorization"] == f"Bearer {stored_key}"
    assert request.json["model"] == "m1"
    assert [p["message"] for p in engine.push.payloads()] == ["凭据有效。"]


def test_missing_credential_at_fire_time_is_retryable(engine):
    engine.api.put_credentials(
        [
            {
                "credId": "gone",
                "value": {"apiUrl": engine.llm.base_url, "apiKey": "sk-x-0123456789ab", "primaryModel": "m"},
            }
        ]
    )
    created = schedule(engine, messageType="prompted", userMessage=None, completePrompt="x", credRefs={"chat": "gone"})
    engine.api.delete_credentials({"credIds": ["gone"]})
    due(engine)
    engine.harness.tick_and_drain()
    task = engine.api.get_message(created["uuid"]).data["task"]
    assert task["retryCount"] == 1 and task["lastError"]["errorCode"] == "CREDENTIAL_MISSING"


@pytest.mark.dynamo_store
def test_a_claim_that_keeps_failing_is_isolated_and_retried_next_tick(engine, monkeypatch):
    """The tick claims in batches (one request each: single writes or a transaction); when a batch cannot run,
    its tasks are claimed one by one, so a task whose claim keeps failing is reported alone and the others go out."""
    from amsg.adapters.dynamo.single_writes import WriteOutcome
    from amsg.engine.tick import run_tick
    from botocore.exceptions import ClientError

    bad = schedule(engine, userMessage="later")
    schedule(engine, userMessage="now")
    due(engine)
    table = engine.ctx.claims.db
    real_transact, real_singles, real_claim = table.transact, table.write_singles, engine.ctx.claims.claim
    throttled = ClientError({"Error": {"Code": "ThrottlingException", "Message": "x"}}, "TransactWriteItems")

    def throttled_transact(actions):
        raise throttled

    def throttled_singles(writes):
        return [WriteOutcome(False, error=throttled) for _ in writes]

    def flaky(user_id, uuid, **kw):
        if uuid == bad["uuid"]:
            raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "x"}}, "UpdateItem")
        return real_claim(user_id, uuid, **kw)

    monkeypatch.setattr(table, "transact", throttled_transact)
    monkeypatch.setattr(table, "write_singles", throttled_singles)
    monkeypatch.setattr(engine.ctx.claims, "claim", flaky)
    summary = run_tick(engine.ctx)
    assert summary["enqueuedTasks"] == 1
    assert summary["details"]["failedTasks"] == [
        {"taskUuid": bad["uuid"], "reason": "ClientError", "status": "claim_failed"}
    ]
    monkeypatch.setattr(table, "transact", real_transact)
    monkeypatch.setattr(table, "write_singles", real_singles)
    monkeypatch.setattr(engine.ctx.claims, "claim", real_claim)
    engine.harness.tick_and_drain()
    assert sorted(p["message"] for p in engine.push.payloads()) == ["later", "now"]


@pytest.mark.dynamo_store
def test_the_tick_claims_a_batch_in_one_transaction_and_one_read(engine, monkeypatch):
    """Ungrouped claims travel together: one TransactWriteItems and one BatchGetItem for up to 25 tasks,
    each claim's fence (claim_version) read back exactly, and a task claimed already is left out."""
    from amsg.engine.messages import parse_task_message

    from tests.support.aws_calls import record_aws_calls

    size = engine.ctx.claims.claim_batch
    created = [schedule(engine, userMessage=f"m{i}") for i in range(size + 3)]
    due(engine)
    claims = engine.ctx.claims
    monkeypatch.setattr(claims, "single_claims", False)  # ClaimWrites=transaction (the default writes one each)
    real_claim_many, taken, lock = claims.claim_many, [], threading.Lock()

    def overlapping_tick_first(wanted, **terms):
        """Another tick claims one task of the first batch between this tick's read of the due index and its
        claim (batches run in parallel: the lock picks the first)."""
        with lock:
            if not taken:
                row = claims.claim(
                    wanted[-1].user_id,
                    wanted[-1].uuid,
                    expected_next_send_at_ms=FIRST_MS,
                    now_ms=terms["now_ms"],
                    lease_until_ms=terms["lease_until_ms"],
                    owner="elsewhere",
                )
                assert row is not None
                taken.append(row.uuid)
        return real_claim_many(wanted, **terms)

    monkeypatch.setattr(claims, "claim_many", overlapping_tick_first)
    with record_aws_calls() as recorder:
        summary = engine.harness.tick()
    assert summary["claimedTasks"] == size + 2 and summary["details"]["claimSkippedTasks"] == 1
    calls = Counter(c.operation for c in recorder.calls if c.service == "dynamodb")
    assert calls["UpdateItem"] == 1  # the other tick's claim
    assert calls["BatchGetItem"] == 2
    assert calls["TransactWriteItems"] == 3  # the batch holding the taken task is retried without it
    messages = []
    while batch := engine.harness.sqs.receive_message(
        QueueUrl=engine.harness.queue_url, MaxNumberOfMessages=10, VisibilityTimeout=60
    ).get("Messages", []):
        messages += batch
    parsed = [parse_task_message(m["Body"]) for m in messages]
    assert sorted(m.uuid for m in parsed) == sorted(c["uuid"] for c in created if c["uuid"] not in taken)
    assert {m.claim_version for m in parsed} == {1}
    engine.harness.run(messages)
    assert len(engine.push.payloads()) == size + 2


def test_a_record_started_without_enough_time_hands_its_claim_back(engine):
    import json as json_lib

    from amsg.engine.messages import parse_task_message
    from amsg.engine.run_task import run_message

    schedule(engine, userMessage="patience")
    due(engine)
    engine.harness.tick()
    (message,) = engine.harness.receive()
    result = run_message(
        engine.ctx, parse_task_message(message["Body"]), remaining_ms=lambda: 5_000, owner="late-in-batch"
    )
    assert result["skipped"] == "no_time_left"
    row = engine.ctx.tasks.find_task(json_lib.loads(message["Body"])["uuid"])
    assert row.lease_until_ms is None and row.retry_count == 0  # released, no retry consumed
    assert engine.harness.tick()["claimedTasks"] == 1  # due again at once
    engine.harness.drain()
    assert [p["message"] for p in engine.push.payloads()] == ["patience"]


def test_a_push_answered_after_the_timeout_is_never_sent_again(engine):
    """The push service takes the push and answers late: the outcome is unknown, so the push is not sent again,
    the next segment is not pushed, the task settles and both wait in the outbox (docs/delivery.md)."""
    created = schedule(engine, userMessage="第一句。第二句！")
    engine.push.set_delay(engine.subscription.endpoint_id, 0.6)
    engine.ctx.delivery.push_sender._timeout_s = 0.2  # the sandbox's sender, as AMSG_PUSH_TIMEOUT_MS=200 builds it
    due(engine)
    engine.harness.tick_and_drain()
    for _ in range(3):  # no retry, however long we wait
        engine.ctx.clock.advance(10 * 60_000)
        engine.harness.tick_and_drain()
    assert [r.payload["message"] for r in engine.push.received] == ["第一句。"]
    assert engine.api.get_message(created["uuid"]).status == 404  # settled (deleted): nothing half-done
    entries = engine.api.get_encrypted("/outbox").data["entries"]
    assert len(entries) == 2  # both segments wait for the pull
