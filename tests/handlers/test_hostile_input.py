"""Regression tests for the black-box fuzzer's request-side findings: bodies that took quadratic time, regexes that
backtracked for seconds, unbounded fields that reached storage as a 500, input accepted then failing at every
fire, and task uuids that differed only in case. Each drives the real handlers (in process, moto)."""

from __future__ import annotations

import time
import uuid

import pytest

from tests.handlers.test_cloud_data import err, get, post
from tests.support.ddb_limits import enforce_dynamodb_limits
from tests.support.wire_client import DUMMY_AUTH, DUMMY_P256DH, WireClient, dummy_subscription

FUTURE = "2030-01-01T00:00:00.000Z"
ENC = {"X-Payload-Encrypted": "true", "X-Encryption-Version": "1"}
FIXED = {"contactName": "Rei", "messageType": "fixed", "userMessage": "hi", "firstSendTime": FUTURE}
CATASTROPHIC = ["(?:a+)+b", "(a+)+b", "(a|aa)+$", "(.*a){20}", "(x+x+)+y"]


@pytest.fixture
def strict(api, ctx):
    """The api client on a moto that refuses what DynamoDB refuses."""
    enforce_dynamodb_limits(ctx.tasks.db)
    assert api.put_subscription(dummy_subscription()).status == 200
    return api


def invalid_fields(resp) -> list[str]:
    return resp.body["error"].get("details", {}).get("invalidFields", [])


# ---- 1. linear-time body checks, bounded regexes ------------------------------------------------------------------


def hostile_body(n: int) -> str:
    return "[" * 70 + '"' + '\\"' * n


@pytest.mark.parametrize(("method", "path"), [("POST", "/schedule-message"), ("PUT", "/push-subscription")])
def test_unterminated_escaped_string_body_is_refused_fast(strict, method, path):
    """Was 13-17 s at 64 KB (quadratic): now well under a second at 1 MB."""
    start = time.perf_counter()
    resp = strict.request(method, path, body=hostile_body(500_000), headers=ENC)
    assert time.perf_counter() - start < 3
    assert (resp.status, resp.code) == (400, "INVALID_ENCRYPTED_PAYLOAD")


@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_catastrophic_split_patterns_are_refused_at_schedule_time(strict, pattern):
    resp = strict.schedule({**FIXED, "splitPattern": pattern})
    assert (resp.status, resp.code) == (400, "INVALID_PARAMETERS")
    assert invalid_fields(resp) == ["splitPattern"]


@pytest.mark.parametrize("pattern", CATASTROPHIC[:2])
def test_catastrophic_split_patterns_are_refused_at_update_time(strict, pattern):
    task = str(uuid.uuid4())
    assert strict.schedule({**FIXED, "uuid": task}).status == 201
    resp = strict.update(task, {"splitPattern": [",", pattern]})
    assert (resp.status, resp.code) == (400, "INVALID_UPDATE_DATA")


def test_instant_with_a_catastrophic_pattern_is_a_400_and_sends_nothing(engine):
    start = time.perf_counter()
    resp = engine.api.schedule(
        {**FIXED, "messageType": "instant", "userMessage": "a" * 30 + "!", "splitPattern": "(?:a+)+b"}
    )
    assert time.perf_counter() - start < 5  # was 43.7 s, a 500 after the gateway timeout, and a push anyway
    assert (resp.status, resp.code) == (400, "INVALID_PARAMETERS")
    assert engine.push.received == []


# ---- 2. every field bounded before storage ------------------------------------------------------------------------


def valid_subscription(**overrides):
    return {**dummy_subscription(), **overrides}


@pytest.mark.parametrize(
    ("subscription", "field"),
    [
        (valid_subscription(expirationTime="字" * 70_000), "expirationTime"),
        (valid_subscription(expirationTime="soon"), "expirationTime"),
        (valid_subscription(keys={"p256dh": DUMMY_P256DH, "auth": "A" * 200_000}), "keys.auth"),
        (valid_subscription(keys={"p256dh": DUMMY_P256DH, "auth": "c2VjcmV0"}), "keys.auth"),
        (valid_subscription(keys={"p256dh": "BExampleKeyNotUsedForSending", "auth": DUMMY_AUTH}), "keys.p256dh"),
        (valid_subscription(keys={"p256dh": "x" * 87, "auth": DUMMY_AUTH}), "keys.p256dh"),
        (valid_subscription(keys={"p256dh": "字" * 87, "auth": DUMMY_AUTH}), "keys.p256dh"),
        (valid_subscription(keys="k"), "keys"),
        (valid_subscription(endpoint="https://push.example/" + "x" * 5000), "endpoint"),
        (valid_subscription(endpoint="ftp://push.example/x"), "endpoint"),
        (valid_subscription(endpoint="not a url"), "endpoint"),
    ],
)
def test_push_subscription_fields_are_bounded(strict, subscription, field):
    resp = strict.put_subscription(subscription)
    assert (resp.status, resp.code) == (400, "INVALID_PUSH_SUBSCRIPTION"), resp.text
    assert resp.body["error"]["details"]["field"] == field


def test_unknown_subscription_fields_are_dropped(strict, ctx):
    resp = strict.put_subscription(valid_subscription(extra="y" * 300_000, expirationTime=None))
    assert resp.status == 200, resp.text
    row = ctx.subscriptions.get_push_subscription(strict.user_id)
    assert len(row.encrypted_subscription) < 2_000
    assert strict.get_subscription().data["endpoint"] == dummy_subscription()["endpoint"]


def test_endpoint_only_subscription_is_still_accepted(strict):
    """The reference's own tests register endpoint-only objects; the sender refuses them at delivery."""
    assert strict.put_subscription({"endpoint": "https://push.example.test/x"}).status == 200


def test_long_cleanup_operation_id_is_not_found_without_reaching_storage(strict):
    err(get(strict, "cleanup-operations/" + "a" * 2000), 404, "CLOUD_RECORD_NOT_FOUND")
    err(get(strict, "cleanup-operations/" + "é" * 600), 404, "CLOUD_RECORD_NOT_FOUND")


def test_long_plan_id_is_not_found_without_reaching_storage(strict):
    resp = post(strict, "cleanup-operations", {"planId": "a" * 1100, "idempotencyKey": "k"})
    err(resp, 404, "CLOUD_RECORD_NOT_FOUND")


# ---- 3. what can never be delivered is refused up front -----------------------------------------------------------

PROMPTED = {
    "contactName": "Rei",
    "messageType": "prompted",
    "completePrompt": "say hi",
    "apiUrl": "https://llm.example/v1",
    "primaryModel": "m",
    "firstSendTime": FUTURE,
}


@pytest.mark.parametrize("key", ["sk-键", "sk-\nx", "sk-\x00", "sk-\u00e9"])
def test_inline_api_key_that_cannot_be_a_header_is_refused(strict, key):
    resp = strict.schedule({**PROMPTED, "apiKey": key})
    assert (resp.status, resp.code) == (400, "INVALID_PARAMETERS")
    assert invalid_fields(resp) == ["apiKey"]


def test_ascii_api_key_is_accepted(strict):
    assert strict.schedule({**PROMPTED, "apiKey": "sk-test_KEY.123"}).status == 201


def test_update_to_a_non_ascii_api_key_is_refused(strict):
    task = str(uuid.uuid4())
    assert strict.schedule({**PROMPTED, "apiKey": "sk-a", "uuid": task}).status == 201
    resp = strict.update(task, {"apiKey": "密钥"})
    assert (resp.status, resp.code) == (400, "INVALID_UPDATE_DATA")
    assert invalid_fields(resp) == ["apiKey"]


def test_stored_credential_with_a_non_ascii_api_key_is_refused(strict):
    value = {"apiUrl": "https://llm.example/v1", "apiKey": "sk-键", "primaryModel": "m"}
    resp = strict.put_credentials([{"credId": "global/chat", "value": value}])
    assert (resp.status, resp.code) == (400, "INVALID_PARAMETERS")
    assert invalid_fields(resp) == ["credentials[0].value"]


def test_instant_message_over_the_push_budget_is_a_400_with_size_and_budget(engine):
    resp = engine.api.schedule({**FIXED, "messageType": "instant", "userMessage": "字" * 2000, "splitPattern": "\\n"})
    assert (resp.status, resp.code) == (400, "INVALID_PARAMETERS"), resp.text
    details = resp.body["error"]["details"]
    assert details["invalidFields"] == ["userMessage"]
    assert details["maxBytes"] == 3993 and details["bytes"] > 3993
    assert engine.push.received == []
    assert engine.api.list_messages().data["tasks"] == []


def test_instant_message_that_splits_into_pushes_within_budget_is_sent(engine):
    text = "。".join(["字" * 500] * 4) + "。"  # 6 KB in all, 1.5 KB per sentence
    resp = engine.api.schedule({**FIXED, "messageType": "instant", "userMessage": text})
    assert resp.status == 200, resp.text
    assert resp.data["messagesSent"] == 4


@pytest.mark.parametrize("when", ["２０３０-01-01T00:00:00Z", "2030-01-01T00:00:00.１Z", "٢٠٣٠-01-01T00:00:00Z"])
def test_non_ascii_digits_in_dates_are_refused(strict, when):
    resp = strict.schedule({**FIXED, "firstSendTime": when})
    assert (resp.status, resp.code) == (400, "INVALID_TIMESTAMP")


def test_non_ascii_digits_in_next_send_at_are_refused(strict):
    task = str(uuid.uuid4())
    assert strict.schedule({**FIXED, "uuid": task}).status == 201
    resp = strict.update(task, {"nextSendAt": "２０３１-01-01T00:00:00Z"})
    assert (resp.status, resp.code) == (400, "INVALID_UPDATE_DATA")


# ---- 6. task uuid case, repeated headers --------------------------------------------------------------------------


def other_user(api) -> WireClient:
    client = WireClient(api.transport, user_id=str(uuid.uuid4()), server_token=api.server_token)
    client.init()
    assert client.put_subscription(dummy_subscription()).status == 200
    return client


def test_a_task_uuid_upper_cased_cannot_be_taken_by_another_user(strict):
    task = str(uuid.uuid4())
    assert strict.schedule({**FIXED, "uuid": task}).status == 201
    bob = other_user(strict)
    resp = bob.schedule({**FIXED, "uuid": task.upper()})
    assert (resp.status, resp.code) == (409, "TASK_UUID_CONFLICT")


def test_a_task_is_found_under_any_case_of_its_uuid(strict):
    task = str(uuid.uuid4()).upper()
    created = strict.schedule({**FIXED, "uuid": task})
    assert created.status == 201 and created.data["uuid"] == task.lower()
    assert strict.get_message(task).status == 200
    assert strict.get_message(task.lower()).status == 200
    assert strict.update(task, {"userMessage": "new"}).status == 200
    assert strict.cancel(task.lower()).status == 200


def test_superseding_the_same_uuid_in_another_case_is_refused(strict):
    task = str(uuid.uuid4())
    assert strict.schedule({**FIXED, "uuid": task}).status == 201
    resp = strict.schedule({**FIXED, "uuid": task, "supersedesUuid": task.upper()})
    assert (resp.status, resp.code) == (400, "INVALID_PARAMETERS")
    assert invalid_fields(resp) == ["supersedesUuid"]


def test_a_user_id_header_sent_twice_with_one_value_is_that_value(strict):
    joined = f"{strict.user_id}, {strict.user_id}"  # what API Gateway makes of a repeated header
    resp = strict.request("GET", "/messages", headers={"X-User-Id": joined})
    assert resp.status == 200, resp.text


def test_a_user_id_header_sent_twice_with_two_values_is_refused(strict):
    resp = strict.request("GET", "/messages", headers={"X-User-Id": f"{strict.user_id},{uuid.uuid4()}"})
    assert (resp.status, resp.code) == (400, "INVALID_USER_ID_FORMAT")


# ---- fire time: a pattern that cannot split is a permanent failure, never a stalled or retried sandbox ----------


def fire_with_pattern(engine, monkeypatch, pattern: str, text: str) -> dict:
    """A task whose stored pattern validation would refuse (as if written around the API), fired once."""
    from amsg.domain import validation

    from tests.handlers.test_delivery import due, schedule

    monkeypatch.setattr(validation, "split_pattern_error", lambda value: None)
    created = schedule(engine, userMessage=text, splitPattern=pattern)
    due(engine)
    start = time.perf_counter()
    engine.harness.tick_and_drain()
    assert time.perf_counter() - start < 10  # the fuzzer's n = 26 held the tick 3.1 s; exponential beyond
    resp = engine.api.get_message(created["uuid"])
    assert resp.status == 409 and resp.code == "TASK_ALREADY_COMPLETED", resp.text
    return resp.body["error"]["details"]


def test_a_stored_catastrophic_pattern_fails_permanently_at_fire_time(engine, monkeypatch):
    details = fire_with_pattern(engine, monkeypatch, "(?:a+)+b", "a" * 30 + "!")
    assert details["status"] == "failed"
    assert details["lastError"]["errorCode"] == "SPLIT_PATTERN_FAILED"
    assert engine.push.received == []


def test_a_match_over_the_cpu_budget_fails_permanently_at_fire_time(engine, monkeypatch):
    import regex
    from amsg.domain import splitting

    # a pattern the static check would refuse, compiled unguarded: only the budget stops it
    monkeypatch.setattr(splitting, "compile_js_pattern", lambda source: regex.compile("(a|aa)+$"))
    details = fire_with_pattern(engine, monkeypatch, "(a|aa)+$", "a" * 60 + "!")
    assert details["status"] == "failed"
    assert details["lastError"]["errorCode"] == "SPLIT_PATTERN_FAILED"
    assert "CPU time" in details["lastError"]["reason"]
    assert engine.push.received == []
