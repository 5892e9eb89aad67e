"""Regression tests for inputs that used to end in a 500 or a body JavaScript cannot parse: deep nesting, numbers
beyond DynamoDB's or a double's range, task ids longer than a sort key, and SDK text in ``error.cause``."""

from __future__ import annotations

import json
import uuid

import pytest
from botocore.exceptions import ClientError

from tests.support.ddb_limits import enforce_dynamodb_limits, table_clients
from tests.support.fuzz import encrypt_text
from tests.support.wire_client import dummy_subscription

FUTURE = "2030-01-01T00:00:00.000Z"
ENC = {"X-Payload-Encrypted": "true", "X-Encryption-Version": "1"}
DEEP = "[" * 1500 + "]" * 1500
# fixed, not random: parametrize ids must be the same in every xdist worker
ANY_TASK_UUID = "9b2f6c1e-4d3a-4e8b-9f1a-2c3d4e5f6a7b"


def strict_json(text: str):
    def reject(token):
        raise ValueError(token)

    return json.loads(text, parse_constant=reject)


@pytest.fixture
def strict(api, ctx):
    """The api client on a moto that refuses what DynamoDB refuses; counts DynamoDB calls."""
    enforce_dynamodb_limits(ctx.tasks.db)
    calls: list[str] = []
    for client in table_clients(ctx.tasks.db):
        client.meta.events.register("before-call.dynamodb.*", lambda model, **_: calls.append(model.name))
    api.dynamodb_calls = calls
    return api


def send_plaintext(api, method: str, path: str, text: str):
    body = json.dumps(encrypt_text(text, api.user_key))
    return api.request(method, path, body=body, headers=ENC)


# ---- 1. nesting ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "code"),
    [
        ("POST", "/schedule-message", "INVALID_ENCRYPTED_PAYLOAD"),
        ("DELETE", "/llm-credentials", "INVALID_ENCRYPTED_PAYLOAD"),
        ("PUT", "/push-subscription", "INVALID_ENCRYPTED_PAYLOAD"),
        ("PUT", "/client-state", "INVALID_ENCRYPTED_PAYLOAD"),
        ("POST", "/outbox/ack", "INVALID_ENCRYPTED_PAYLOAD"),
    ],
)
def test_deep_raw_body_is_the_envelope_error(strict, method, path, code):
    resp = strict.request(method, path, body=DEEP, headers=ENC)
    assert (resp.status, resp.code) == (400, code)
    nested_object = '{"a":' * 1500 + "1" + "}" * 1500
    assert strict.request(method, path, body=nested_object, headers=ENC).code == code


@pytest.mark.parametrize(
    ("method", "path", "code"),
    [
        ("POST", "/schedule-message", "INVALID_PAYLOAD_FORMAT"),
        ("PUT", f"/update-message?id={ANY_TASK_UUID}", "DECRYPTION_FAILED"),  # update maps bad JSON to this code
        ("DELETE", "/llm-credentials", "DECRYPTION_FAILED"),  # so does DELETE /llm-credentials
        ("PUT", "/llm-credentials", "INVALID_PAYLOAD_FORMAT"),
        ("PUT", "/push-subscription", "INVALID_PAYLOAD_FORMAT"),
        ("PUT", "/client-state", "INVALID_PAYLOAD_FORMAT"),
        ("POST", "/outbox/ack", "INVALID_PAYLOAD_FORMAT"),
        ("DELETE", "/outbox", "INVALID_PAYLOAD_FORMAT"),
    ],
)
def test_deep_decrypted_payload_answers_the_routes_400(strict, method, path, code):
    for text in (DEEP, '{"metadata":' + DEEP + "}", "[" * 65 + "]" * 65):
        resp = send_plaintext(strict, method, path, text)
        assert (resp.status, resp.code) == (400, code), text[:80]


def test_nesting_up_to_the_limit_is_accepted(strict):
    assert strict.put_subscription(dummy_subscription()).status == 200
    metadata = "[" * 60 + "1" + "]" * 60
    payload = (
        f'{{"contactName":"Rei","messageType":"fixed","userMessage":"hi","firstSendTime":"{FUTURE}",'
        f'"metadata":{{"deep":{metadata}}}}}'
    )
    created = send_plaintext(strict, "POST", "/schedule-message", payload)
    assert created.status == 201, created.text
    task = strict.get_message(created.data["uuid"]).data["task"]
    assert json.dumps(task["metadata"]["deep"], separators=(",", ":")) == metadata


# ---- 2. numbers beyond DynamoDB's range ------------------------------------------------------------------------


@pytest.mark.parametrize("token", ["1e39", "9" * 39, "1e38", "1" + "0" * 38, "8640000000000001", "1e400", "-5", "2.5"])
def test_push_subscription_updated_at_out_of_range_is_invalid(strict, token):
    text = f'{{"subscription":{json.dumps(dummy_subscription())},"updatedAt":{token}}}'
    resp = send_plaintext(strict, "PUT", "/push-subscription", text)
    expected = "INVALID_PAYLOAD_FORMAT" if token == "1e400" else "INVALID_UPDATED_AT"
    assert (resp.status, resp.code) == (400, expected)
    assert strict.get_subscription().data["exists"] is False


@pytest.mark.parametrize("updated_at", [1, 1_893_369_600_000, 8_640_000_000_000_000])
def test_push_subscription_updated_at_round_trips_exactly(strict, updated_at):
    assert strict.put_subscription(dummy_subscription(), updated_at=updated_at).data == {"updatedAt": updated_at}
    assert strict.get_subscription().data["updatedAt"] == updated_at


def test_outbox_cursor_beyond_every_id_is_an_empty_page(strict):
    since = "9" * 50
    resp = strict.get_encrypted(f"/outbox?since={since}")
    assert resp.status == 200, resp.text
    assert resp.data["entries"] == [] and resp.data["cursor"] == int(since)


# ---- 3. task ids that cannot exist ------------------------------------------------------------------------------


@pytest.mark.parametrize("task_id", ["x" * 1100, "é" * 600, "not-a-uuid", "%00", ANY_TASK_UUID + "x"])
def test_impossible_task_ids_are_not_found_without_a_storage_call(strict, task_id):
    from urllib.parse import quote

    for method, path in [("GET", "/message"), ("DELETE", "/cancel-message")]:
        strict.dynamodb_calls.clear()
        resp = strict.request(method, f"{path}?id={quote(task_id)}")
        assert (resp.status, resp.code) == (404, "TASK_NOT_FOUND"), (path, resp.text)
        assert strict.dynamodb_calls == []
    strict.dynamodb_calls.clear()
    resp = strict.update(task_id, {"userMessage": "x"})
    assert (resp.status, resp.code) == (404, "TASK_NOT_FOUND")
    assert strict.dynamodb_calls == []


def test_update_validates_the_patch_before_answering_not_found(strict):
    resp = strict.update("x" * 1100, {"nextSendAt": "not a time"})
    assert (resp.status, resp.code) == (
        400,
        "INVALID_UPDATE_DATA",
    )  # the documented check order: field validation before the task lookup


def test_500_cause_never_carries_storage_text(strict, ctx, monkeypatch):
    secret = "Table amsg-test key U#someone T#... ValidationException details"

    def boom(*args, **kwargs):
        raise ClientError({"Error": {"Code": "ValidationException", "Message": secret}}, "GetItem")

    monkeypatch.setattr(ctx.tasks, "get_task", boom)
    resp = strict.get_message(str(uuid.uuid4()))
    assert (resp.status, resp.code) == (500, "INTERNAL_ERROR")
    assert resp.body["error"]["cause"] == {"stage": "request", "name": "Error"}
    assert "ValidationException" not in resp.text and "amsg-test" not in resp.text


def test_500_cause_keeps_our_own_codes(strict, ctx, monkeypatch):
    from amsg.errors import StoreUnavailable

    def unavailable(*args, **kwargs):
        raise StoreUnavailable("task payload parts are incomplete")

    monkeypatch.setattr(ctx.tasks, "get_task", unavailable)
    resp = strict.get_message(str(uuid.uuid4()))
    assert resp.body["error"]["cause"] == {
        "stage": "request",
        "name": "StoreUnavailable",
        "message": "task payload parts are incomplete",
    }


# ---- 4. numbers out of double range ------------------------------------------------------------------------------


@pytest.mark.parametrize("token", ["1e400", "-1e400", "NaN", "Infinity", "1" + "0" * 400])
def test_non_finite_numbers_are_refused_where_they_enter(strict, token):
    assert strict.put_subscription(dummy_subscription()).status == 200
    base = f'"contactName":"Rei","userMessage":"hi","firstSendTime":"{FUTURE}"'
    for text in (
        f'{{{base},"messageType":"fixed","metadata":{{"x":{token}}}}}',
        f'{{{base},"messageType":{token}}}',  # used to echo "providedType":-Infinity
    ):
        resp = send_plaintext(strict, "POST", "/schedule-message", text)
        assert (resp.status, resp.code) == (400, "INVALID_PAYLOAD_FORMAT")
        strict_json(resp.text)
    assert strict.list_messages().data["tasks"] == []


def test_large_finite_numbers_round_trip_as_json_parse_reads_them(strict):
    assert strict.put_subscription(dummy_subscription()).status == 200
    base = f'"contactName":"Rei","messageType":"fixed","userMessage":"hi","firstSendTime":"{FUTURE}"'
    text = f'{{{base},"metadata":{{"big":1e308,"int":{"9" * 300},"small":-1e-320}}}}'
    created = send_plaintext(strict, "POST", "/schedule-message", text)
    assert created.status == 201, created.text
    resp = strict.get_message(created.data["uuid"])
    assert resp.status == 200
    assert resp.data["task"]["metadata"] == {"big": 1e308, "int": int("9" * 300), "small": -1e-320}


# ---- strings that are valid JSON but not valid Unicode -------------------------------------------------------------


def test_lone_surrogates_never_reach_a_key(strict):
    value = '{"apiUrl":"http://x.test","apiKey":"k","primaryModel":"m"}'
    put = send_plaintext(
        strict, "PUT", "/llm-credentials", f'{{"credentials":[{{"credId":"a\\ud800","value":{value}}}]}}'
    )
    assert (put.status, put.code) == (400, "INVALID_PARAMETERS")
    for body in ('{"credIds":["\\udc00"]}', '{"credIdPrefix":"\\ud800"}'):
        resp = send_plaintext(strict, "DELETE", "/llm-credentials", body)
        assert (resp.status, resp.code) == (400, "INVALID_PARAMETERS")
    ack = send_plaintext(strict, "POST", "/outbox/ack", '{"messageIds":["\\ud800"]}')
    assert (ack.status, ack.data) == (200, {"acked": 0})
    delete = send_plaintext(strict, "DELETE", "/outbox", '{"messageIds":["x\\ud800"]}')
    assert (delete.status, delete.data) == (200, {"deleted": 0})
