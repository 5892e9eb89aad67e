"""PUT/GET/DELETE /llm-credentials and credRefs at schedule/update time,
driven through the independent wire client; fire-time resolution through the delivery engine."""

from __future__ import annotations

import json
import re

import pytest
from amsg.crypto import UserCodec, encrypt_for_storage
from amsg.domain.credentials import make_credential_lookup, resolve_cred_value
from amsg.domain.llm import resolve_chat_credentials
from amsg.ports import CredentialWrite

from tests.conftest import T0_MS
from tests.support.wire_client import dummy_subscription, encrypt

pytestmark = pytest.mark.memory_store  # storage semantics only: the in-memory fakes (tests/contract checks them)

ISO_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")
SECRET = "sk-live-secret-value-0123456789"


def value(key: str = SECRET, **extra) -> dict:
    return {"apiUrl": "https://llm.example/v1", "apiKey": key, "primaryModel": "model-x", **extra}


def cred(cred_id: str, key: str = SECRET, **extra) -> dict:
    return {"credId": cred_id, "value": value(key, **extra)}


def listed(api) -> list[str]:
    resp = api.get_credentials()
    assert resp.status == 200, resp.text
    return [row["credId"] for row in resp.data["credentials"]]


def invalid_fields(resp) -> list[str]:
    assert resp.status == 400 and resp.code == "INVALID_PARAMETERS", resp.text
    return resp.body["error"]["details"]["invalidFields"]


# ---- PUT / GET ------------------------------------------------------------------------------------------------


def test_round_trip_values_never_returned(ctx, api):
    resp = api.put_credentials([cred("global/chat"), cred("char:a/chat", extra_field="kept")])
    assert resp.status == 200 and resp.data == {"upserted": 2}
    got = api.get_credentials()
    assert got.body["success"] is True and "encrypted" not in got.body  # plain response
    rows = got.data["credentials"]
    assert [r["credId"] for r in rows] == ["char:a/chat", "global/chat"]  # binary credId order
    assert all(set(r) == {"credId", "updatedAt"} and ISO_RE.match(r["updatedAt"]) for r in rows)
    assert SECRET not in got.text and "llm.example" not in got.text
    # at rest: storage ciphertext under the user key, the value as sent (extra fields too)
    stored = ctx.credentials.get_values(api.user_id, ["char:a/chat", "nope"])
    assert set(stored) == {"char:a/chat"} and SECRET not in stored["char:a/chat"]
    assert resolve_cred_value(stored["char:a/chat"], ctx.codec(api.user_id)) == value()


@pytest.mark.dynamo_store  # reads the table's items
def test_overwrite_keeps_count_created_at_and_refreshes_updated_at(ctx, api):
    api.put_credentials([cred("k")])
    first = ctx.credentials.db.get({"PK": f"U#{api.user_id}", "SK": "C#k"})
    ctx.clock.advance(5_000)
    assert api.put_credentials([cred("k", key="rotated")]).data == {"upserted": 1}
    second = ctx.credentials.db.get({"PK": f"U#{api.user_id}", "SK": "C#k"})
    assert second["created_at"] == first["created_at"] and second["updated_at"] != first["updated_at"]
    assert int(second["rev"]) == 2
    assert ctx.credentials.count(api.user_id) == 1
    lookup = make_credential_lookup(ctx.credentials, api.user_id, ctx.codec(api.user_id))
    assert lookup("k")["apiKey"] == "rotated"
    assert lookup("missing") is None


def test_duplicates_last_wins(ctx, api):
    resp = api.put_credentials([cred("d", key="one"), cred("e"), cred("d", key="two")])
    assert resp.data == {"upserted": 2}
    stored = ctx.credentials.get_values(api.user_id, ["d"])
    assert resolve_cred_value(stored["d"], ctx.codec(api.user_id))["apiKey"] == "two"


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ({}, ["credentials"]),
        ({"credentials": []}, ["credentials"]),
        ({"credentials": {"credId": "a"}}, ["credentials"]),
        ({"credentials": [cred(f"c{i}") for i in range(101)]}, ["credentials"]),
        ({"credentials": ["x"]}, ["credentials[0].credId"]),
        ({"credentials": [{"value": value()}]}, ["credentials[0].credId"]),
        ({"credentials": [cred("")]}, ["credentials[0].credId"]),
        ({"credentials": [cred("x" * 129)]}, ["credentials[0].credId"]),
        ({"credentials": [cred("😀" * 65)]}, ["credentials[0].credId"]),  # 130 UTF-16 units
        ({"credentials": [cred("a\u0000b")]}, ["credentials[0].credId"]),
        ({"credentials": [cred("a\u001fb")]}, ["credentials[0].credId"]),
        ({"credentials": [cred("a\u007fb")]}, ["credentials[0].credId"]),
        ({"credentials": [{"credId": 7, "value": value()}]}, ["credentials[0].credId"]),
        ({"credentials": [{"credId": "a"}]}, ["credentials[0].value"]),
        ({"credentials": [{"credId": "a", "value": []}]}, ["credentials[0].value"]),
        ({"credentials": [{"credId": "a", "value": {**value(), "apiKey": ""}}]}, ["credentials[0].value"]),
        ({"credentials": [{"credId": "a", "value": {**value(), "apiUrl": 5}}]}, ["credentials[0].value"]),
        ({"credentials": [{"credId": "a", "value": {"apiUrl": "u", "apiKey": "k"}}]}, ["credentials[0].value"]),
        (
            {"credentials": [{"credId": "a", "value": {**value(), "primaryModel": "m" * 2049}}]},
            ["credentials[0].value"],
        ),
        # the first failure wins, in order
        ({"credentials": [cred("ok"), {"credId": "b"}, cred("x" * 129)]}, ["credentials[1].value"]),
        ({"credentials": [cred("ok"), cred("\n"), {"credId": "b"}]}, ["credentials[1].credId"]),
    ],
)
def test_put_validation(api, body, fields):
    resp = api.send_encrypted("PUT", "/llm-credentials", body)
    assert invalid_fields(resp) == fields
    assert listed(api) == []


def test_put_accepts_limits(api):
    long_ok = "😀" * 64  # exactly 128 UTF-16 units
    big = {"apiUrl": "u" * 2048, "apiKey": "k" * 2048, "primaryModel": "m" * 2048}
    resp = api.put_credentials([{"credId": long_ok, "value": big}] + [cred(f"c{i:03d}") for i in range(99)])
    assert resp.status == 200 and resp.data == {"upserted": 100}


def test_value_error_message_names_the_field(api):
    resp = api.put_credentials([cred("a"), {"credId": "b", "value": {**value(), "apiKey": ""}}])
    assert resp.body["error"]["message"] == "credentials[1].value.apiKey 必须是非空字符串"


def test_row_cap_of_500(ctx, api):
    for batch in range(5):
        assert api.put_credentials([cred(f"c{batch}-{i:02d}") for i in range(100)]).status == 200
    assert ctx.credentials.count(api.user_id) == 500
    resp = api.put_credentials([cred("c0-00"), cred("brand-new"), cred("brand-new")])
    assert resp.status == 400 and resp.code == "LLM_CREDENTIALS_LIMIT_EXCEEDED"
    assert resp.body["error"]["details"] == {"existing": 500, "adding": 1, "limit": 500}
    # overwriting existing rows at the cap is fine
    assert api.put_credentials([cred("c0-00", key="new"), cred("c4-99")]).data == {"upserted": 2}
    assert api.delete_credentials({"credIds": ["c0-01"]}).data == {"deleted": 1}
    assert api.put_credentials([cred("brand-new")]).status == 200
    assert len(listed(api)) == 500


def test_listing_failure_is_503(ctx, api, monkeypatch):
    def boom(user_id):
        raise RuntimeError("throttled")

    monkeypatch.setattr(ctx.credentials, "list", boom)
    resp = api.put_credentials([cred("a")])
    assert resp.status == 503 and resp.code == "LLM_CREDENTIALS_LOOKUP_FAILED"


def test_body_gates(api):
    assert api.request("PUT", "/llm-credentials", body=json.dumps({"credentials": []})).code == "ENCRYPTION_REQUIRED"
    headers = {"X-Payload-Encrypted": "true", "X-Encryption-Version": "1"}
    assert api.request("PUT", "/llm-credentials", headers=headers, body="{}", user=False).code == "USER_ID_REQUIRED"
    v2 = {**headers, "X-Encryption-Version": "2"}
    assert api.request("PUT", "/llm-credentials", headers=v2, body="{}").code == "UNSUPPORTED_ENCRYPTION_VERSION"
    assert api.request("PUT", "/llm-credentials", headers=headers, body='"x"').code == "INVALID_ENCRYPTED_PAYLOAD"
    wrong_key = json.dumps(encrypt({"credentials": []}, "0" * 64))
    assert api.request("PUT", "/llm-credentials", headers=headers, body=wrong_key).code == "DECRYPTION_FAILED"
    scalar = json.dumps(encrypt(5, api.user_key))
    assert api.request("PUT", "/llm-credentials", headers=headers, body=scalar).code == "INVALID_PAYLOAD_FORMAT"
    assert api.request("GET", "/llm-credentials", user=False).code == "USER_ID_REQUIRED"


def test_put_bad_json_inside_envelope_is_invalid_payload_format_but_delete_says_decryption_failed(api):
    import base64
    import os

    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    iv = os.urandom(12)
    sealed = AESGCM(bytes.fromhex(api.user_key)).encrypt(iv, b"{not json", None)
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    body = json.dumps({"iv": b64(iv), "authTag": b64(sealed[-16:]), "encryptedData": b64(sealed[:-16])})
    headers = {"X-Payload-Encrypted": "true", "X-Encryption-Version": "1"}
    assert api.request("PUT", "/llm-credentials", headers=headers, body=body).code == "INVALID_PAYLOAD_FORMAT"
    assert api.request("DELETE", "/llm-credentials", headers=headers, body=body).code == "DECRYPTION_FAILED"
    array = json.dumps(encrypt([], api.user_key))
    assert api.request("DELETE", "/llm-credentials", headers=headers, body=array).code == "INVALID_PAYLOAD_FORMAT"


# ---- DELETE ---------------------------------------------------------------------------------------------------

CHAR_A = "11111111-2222-4333-8444-555555555555"
CHAR_B = "99999999-2222-4333-8444-555555555555"


def seed_five(api):
    ids = [
        f"char:{CHAR_A}/chat",
        f"char:{CHAR_A}/instant",
        f"char:{CHAR_A}/emotion",
        f"char:{CHAR_B}/chat",
        "global/chat",
    ]
    assert api.put_credentials([cred(i) for i in ids]).status == 200


def test_delete_by_prefix(api):
    seed_five(api)
    assert api.delete_credentials({"credIdPrefix": f"char:{CHAR_A}/"}).data == {"deleted": 3}
    assert listed(api) == [f"char:{CHAR_B}/chat", "global/chat"]
    assert api.delete_credentials({"credIdPrefix": "char:nobody/"}).data == {"deleted": 0}


def test_prefix_is_literal(api):
    api.put_credentials([cred("a%b/chat"), cred("axb/chat"), cred("a_b/chat"), cred("ayb/chat")])
    assert api.delete_credentials({"credIdPrefix": "a%b"}).data == {"deleted": 1}
    assert api.delete_credentials({"credIdPrefix": "a_b"}).data == {"deleted": 1}
    assert listed(api) == ["axb/chat", "ayb/chat"]
    long_prefix = "char:" + "x" * 122 + "/"
    api.put_credentials([cred(long_prefix)])
    assert api.delete_credentials({"credIdPrefix": long_prefix}).data == {"deleted": 1}


def test_delete_by_ids_and_all(api):
    seed_five(api)
    resp = api.delete_credentials({"credIds": ["global/chat", "global/chat", "missing"]})
    assert resp.data == {"deleted": 1}
    assert api.delete_credentials({"all": True}).data == {"deleted": 4}
    assert listed(api) == []
    assert api.delete_credentials({"all": True}).data == {"deleted": 0}


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ({}, ["credIds", "credIdPrefix"]),
        ({"all": False}, ["credIds", "credIdPrefix"]),
        ({"all": "true"}, ["credIds", "credIdPrefix"]),
        ({"all": True, "credIdPrefix": "char:"}, ["all", "credIdPrefix"]),
        ({"credIds": ["a"], "credIdPrefix": "char:"}, ["credIds", "credIdPrefix"]),
        ({"all": True, "credIds": ["a"]}, ["all", "credIds"]),
        ({"all": True, "credIds": ["a"], "credIdPrefix": "x"}, ["all", "credIds", "credIdPrefix"]),
        ({"all": False, "credIds": None}, ["credIds"]),
        ({"credIds": []}, ["credIds"]),
        ({"credIds": "a"}, ["credIds"]),
        ({"credIds": ["a", ""]}, ["credIds[1]"]),
        ({"credIds": ["a", "x" * 129]}, ["credIds[1]"]),
        ({"credIds": ["a", 3]}, ["credIds[1]"]),
        ({"credIdPrefix": ""}, ["credIdPrefix"]),
        ({"credIdPrefix": "x" * 129}, ["credIdPrefix"]),
        ({"credIdPrefix": "a\u0000b"}, ["credIdPrefix"]),
        ({"credIdPrefix": 42}, ["credIdPrefix"]),
        ({"credIdPrefix": None}, ["credIdPrefix"]),
    ],
)
def test_delete_validation(api, body, fields):
    seed_five(api)
    assert invalid_fields(api.delete_credentials(body)) == fields
    assert len(listed(api)) == 5


def prompted(**fields) -> dict:
    payload = {
        "contactName": "Rei",
        "messageType": "prompted",
        "completePrompt": "say hi",
        "credRefs": {"chat": "global/chat"},
        "firstSendTime": "2030-01-01T00:00:00.000Z",
    }
    payload.update(fields)
    return payload


@pytest.mark.dynamo_store  # schedules or claims a task: the task store has no fake
def test_schedule_checks_referenced_credentials(ctx, api):
    assert api.put_subscription(dummy_subscription()).status == 200
    resp = api.schedule(prompted(credRefs={"chat": "global/chat", "emotion": "char:a/emo", "other": "global/chat"}))
    assert resp.status == 409 and resp.code == "CREDENTIAL_NOT_FOUND"
    assert resp.body["error"]["details"] == {"missingCredIds": ["global/chat", "char:a/emo"]}
    api.put_credentials([cred("global/chat")])
    resp = api.schedule(prompted(credRefs={"chat": "global/chat", "emotion": "char:a/emo"}))
    assert resp.code == "CREDENTIAL_NOT_FOUND" and resp.body["error"]["details"] == {"missingCredIds": ["char:a/emo"]}
    resp = api.schedule(prompted())
    assert resp.status == 201, resp.text
    task = api.get_message(resp.data["uuid"]).data["task"]
    assert task["credRefs"] == {"chat": "global/chat"}
    assert SECRET not in json.dumps(task)


def test_schedule_credref_errors(ctx, api):
    api.put_subscription(dummy_subscription())
    resp = api.schedule(prompted(credRefs={"chat": "global/chat"}, apiKey="sk-inline"))
    assert invalid_fields(resp) == ["credRefs.chat", "apiUrl", "apiKey", "primaryModel"]
    assert invalid_fields(api.schedule(prompted(credRefs={"chat": "x" * 129}))) == ["credRefs"]


@pytest.mark.dynamo_store  # schedules or claims a task: the task store has no fake
def test_schedule_lookup_failure_is_503(ctx, api, monkeypatch):
    api.put_subscription(dummy_subscription())

    def boom(user_id, ids):
        raise RuntimeError("down")

    monkeypatch.setattr(ctx.credentials, "existing_cred_ids", boom)
    resp = api.schedule(prompted())
    assert resp.status == 503 and resp.code == "LLM_CREDENTIALS_LOOKUP_FAILED"


@pytest.mark.dynamo_store  # schedules or claims a task: the task store has no fake
def test_update_checks_credrefs_and_task_uses_cred_refs(ctx, api):
    api.put_subscription(dummy_subscription())
    api.put_credentials([cred("global/chat"), cred("global/alt")])
    uuid = api.schedule(prompted()).data["uuid"]
    resp = api.update(uuid, {"credRefs": {"chat": "gone"}})
    assert resp.status == 409 and resp.code == "CREDENTIAL_NOT_FOUND"
    assert resp.body["error"]["details"] == {"missingCredIds": ["gone"]}
    assert api.update(uuid, {"credRefs": {"chat": "global/alt"}}).status == 200
    assert api.get_message(uuid).data["task"]["credRefs"] == {"chat": "global/alt"}
    resp = api.update(uuid, {"apiKey": "sk-new-inline"})
    assert resp.status == 409 and resp.code == "TASK_USES_CRED_REFS"
    assert api.update(uuid, {"credRefs": {"chat": "global/alt"}, "apiKey": "k"}).code == "INVALID_UPDATE_DATA"


# ---- fire time --------------------------------------------------------------------------------------------------


def test_resolve_helpers(ctx, api):
    key = ctx.user_key(api.user_id)
    assert resolve_cred_value(None, UserCodec(key)) is None
    assert resolve_cred_value("", UserCodec(key)) is None
    assert resolve_cred_value("zz:zz:zz", UserCodec(key)) is None
    assert resolve_cred_value(encrypt_for_storage("[1]", key), UserCodec(key)) is None
    assert resolve_cred_value(encrypt_for_storage("not json", key), UserCodec(key)) is None
    assert resolve_cred_value(encrypt_for_storage(json.dumps(value()), "0" * 64), UserCodec(key)) is None  # key rotated
    ctx.credentials.upsert(
        api.user_id, [CredentialWrite("global/chat", encrypt_for_storage(json.dumps(value()), key))], 1
    )
    lookup = make_credential_lookup(ctx.credentials, api.user_id, UserCodec(key))
    creds = resolve_chat_credentials({"messageType": "prompted", "credRefs": {"chat": "global/chat"}}, lookup)
    assert (creds.api_url, creds.api_key, creds.primary_model) == ("https://llm.example/v1", SECRET, "model-x")
    assert make_credential_lookup(None, api.user_id, UserCodec(key)) is None


def test_fire_uses_the_stored_credential_and_picks_up_rotation(engine):
    api = engine.api

    def chat_value(key: str, model: str) -> dict:
        return {"apiUrl": engine.llm.base_url, "apiKey": key, "primaryModel": model}

    assert api.put_credentials([{"credId": "global/chat", "value": chat_value("sk-first-111111", "m1")}]).status == 200
    engine.llm.reply_content("早上好。").reply_content("早上好。")
    resp = api.schedule(prompted(firstSendTime="2029-12-31T00:01:00.000Z", recurrenceType="daily"))
    assert resp.status == 201, resp.text
    engine.ctx.clock.current_ms = T0_MS + 61_000
    engine.harness.tick_and_drain()
    assert engine.llm.last_request.headers["authorization"] == "Bearer sk-first-111111"
    assert engine.llm.last_request.json["model"] == "m1"
    api.put_credentials([{"credId": "global/chat", "value": chat_value("sk-rotated-2222", "m2")}])
    engine.ctx.clock.current_ms = T0_MS + 61_000 + 86_400_000
    engine.harness.tick_and_drain()
    assert engine.llm.last_request.headers["authorization"] == "Bearer sk-rotated-2222"
    pushed = json.dumps(engine.push.payloads())
    assert "sk-first" not in pushed and "sk-rotated" not in pushed
    # every push is in the outbox too, readable by the client
    entries, _ = api.outbox_sync()
    assert [e["push"]["message"] for e in entries] == ["早上好。", "早上好。"]
