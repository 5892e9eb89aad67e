"""Wire contract of the task API, driven through the real handlers with an independent client:
headers and their check order, envelopes, auth, gzip, limits, and every route's success shape."""

from __future__ import annotations

import base64
import gzip
import json
import uuid

import pytest

from tests.support.inprocess import InProcessApi
from tests.support.wire_client import WireClient, dummy_subscription, encrypt

# the routes' wire contract, not storage: the in-memory fakes (tests/contract checks them against the adapter);
# a test that builds its own context with ``make_context`` stays on moto
pytestmark = pytest.mark.memory_store

FUTURE = "2030-01-01T00:00:00.000Z"


def fixed(**extra):
    return {"contactName": "Rei", "messageType": "fixed", "userMessage": "hi", "firstSendTime": FUTURE, **extra}


def test_the_module_runs_on_the_fakes_under_make_unit_and_on_moto_otherwise(ctx):
    from amsg.adapters.dynamo.outbox import DynamoOutboxStore
    from amsg.adapters.dynamo.tasks import DynamoTaskStore

    from tests.conftest import fast_tests
    from tests.support.fakes import MemoryOutboxStore, MemoryTaskStore

    tasks, outbox = (MemoryTaskStore, MemoryOutboxStore) if fast_tests() else (DynamoTaskStore, DynamoOutboxStore)
    assert isinstance(ctx.tasks, tasks) and isinstance(ctx.outbox, outbox)


@pytest.fixture
def ready(api):
    assert api.put_subscription(dummy_subscription()).status == 200
    return api


# ---- auth and headers ----------------------------------------------------------------------------------------


def test_client_token_is_checked_first_on_every_route(make_context):
    make_context(AMSG_CLIENT_TOKEN="s3cret-token")
    client = WireClient(InProcessApi(), user_id=str(uuid.uuid4()))
    for method, path in [
        ("GET", "/get-user-key"),
        ("GET", "/vapid-public-key"),
        ("GET", "/capabilities"),
        ("POST", "/init-tenant"),
        ("POST", "/schedule-message"),
        ("GET", "/messages"),
        ("DELETE", "/cancel-message"),
    ]:
        resp = client.request(method, path, user=False)
        assert (resp.status, resp.code) == (401, "INVALID_CLIENT_TOKEN"), path
    client.server_token = "wrong"
    assert client.request("GET", "/get-user-key").code == "INVALID_CLIENT_TOKEN"
    client.server_token = "s3cret-token"
    assert client.init()
    assert client.capabilities().status == 200


@pytest.mark.parametrize(
    ("user_id", "code"),
    [
        (None, "USER_ID_REQUIRED"),
        ("", "USER_ID_REQUIRED"),
        ("not-a-uuid", "INVALID_USER_ID_FORMAT"),
        ("550e8400-e29b-11d4-a716-446655440000", "INVALID_USER_ID_FORMAT"),  # v1
        ("550e8400-e29b-41d4-c716-446655440000", "INVALID_USER_ID_FORMAT"),  # bad variant
    ],
)
def test_user_id_rules(ctx, user_id, code):
    client = WireClient(InProcessApi(), user_id=user_id or "")
    headers = {} if user_id is None else {"X-User-Id": user_id}
    resp = client.request("GET", "/get-user-key", headers=headers, user=False)
    assert (resp.status, resp.code) == (400, code)


def test_user_key_matches_the_spec_vector(make_context):
    make_context()  # master key = 64 × 'a'
    client = WireClient(InProcessApi(), user_id="550e8400-e29b-41d4-a716-446655440000")
    assert client.init() == "b215834307fb91ecea33c56e4dd9e847276828ce9ffff480ee32c947614a651e"
    assert client.request("GET", "/get-user-key").data == {"userKey": client.user_key, "version": 1}


def test_schedule_check_order(api):
    body = json.dumps(encrypt(fixed(), api.user_key))
    enc = {"X-Payload-Encrypted": "true", "X-Encryption-Version": "1"}
    # X-Payload-Encrypted is checked before X-User-Id on schedule-message
    resp = api.request("POST", "/schedule-message", body=body, user=False, headers={"X-Encryption-Version": "1"})
    assert resp.code == "ENCRYPTION_REQUIRED"
    resp = api.request("POST", "/schedule-message", body=body, user=False, headers=enc)
    assert resp.code == "USER_ID_REQUIRED"
    resp = api.request("POST", "/schedule-message", body=body, headers={"X-Payload-Encrypted": "true"})
    assert resp.code == "UNSUPPORTED_ENCRYPTION_VERSION"
    resp = api.request("POST", "/schedule-message", body=body, headers={**enc, "X-Payload-Encrypted": "TRUE"})
    assert resp.code == "ENCRYPTION_REQUIRED"
    for bad in ["not json", "null", "[]", '"str"', '{"iv":1,"authTag":"a","encryptedData":"b"}']:
        assert api.request("POST", "/schedule-message", body=bad, headers=enc).code == "INVALID_ENCRYPTED_PAYLOAD"
    tampered = encrypt(fixed(), api.user_key)
    tampered["authTag"] = base64.b64encode(b"\0" * 16).decode()
    resp = api.request("POST", "/schedule-message", body=json.dumps(tampered), headers=enc)
    assert (resp.status, resp.code) == (400, "DECRYPTION_FAILED")
    other_key = encrypt(fixed(), "b" * 64)
    assert api.request("POST", "/schedule-message", body=json.dumps(other_key), headers=enc).code == "DECRYPTION_FAILED"
    not_object = api.send_encrypted("POST", "/schedule-message", [1, 2])
    assert not_object.code == "INVALID_PAYLOAD_FORMAT"


def test_update_maps_decrypt_failures_and_non_objects(ready):
    created = ready.schedule(fixed()).data
    assert ready.send_encrypted("PUT", f"/update-message?id={created['uuid']}", [1]).code == "INVALID_UPDATE_DATA"
    assert ready.request("PUT", "/update-message", headers={}).code == "TASK_ID_REQUIRED"


# ---- body reading ---------------------------------------------------------------------------------------------


def test_gzip_bodies_and_encoding_errors(ready):
    resp = ready.schedule(fixed(), gzip_body=True)
    assert resp.status == 201, resp.text
    enc = {"X-Payload-Encrypted": "true", "X-Encryption-Version": "1"}
    resp = ready.request(
        "POST", "/schedule-message", body=b"\x1f\x8bnot-gzip", headers={**enc, "Content-Encoding": "gzip"}
    )
    assert (resp.status, resp.code) == (400, "INVALID_CONTENT_ENCODING")
    resp = ready.request("POST", "/schedule-message", body=b"{}", headers={**enc, "Content-Encoding": "br"})
    assert (resp.status, resp.code) == (415, "UNSUPPORTED_CONTENT_ENCODING")
    assert resp.body["error"]["details"] == {"supported": ["gzip"]}
    bomb = gzip.compress(b"{" + b" " * (33 * 1024 * 1024) + b"}")
    resp = ready.request("POST", "/schedule-message", body=bomb, headers={**enc, "Content-Encoding": "gzip"})
    assert (resp.status, resp.code) == (413, "REQUEST_BODY_TOO_LARGE")
    assert resp.body["error"]["details"] == {"maxBytes": 33554432}
    # a gateway that already inflated the body: plain text with the header still set
    body = json.dumps(encrypt(fixed(), ready.user_key))
    resp = ready.request("POST", "/schedule-message", body=body, headers={**enc, "Content-Encoding": "gzip"})
    assert resp.status == 201


def test_bodies_over_the_lambda_limit_get_413(ready):
    resp = ready.request("POST", "/schedule-message", body=b"x" * 4_000_001, headers={})
    assert (resp.status, resp.code) == (413, "REQUEST_BODY_TOO_LARGE")
    assert resp.body["error"]["details"] == {"maxBytes": 4_000_000}


def test_unknown_routes_answer_the_404_envelope(api):
    for method, path in [("GET", "/nope"), ("PATCH", "/messages"), ("GET", "/messages/"), ("POST", "/messages")]:
        resp = api.request(method, path)
        assert resp.status == 404 and resp.body == {
            "success": False,
            "error": {"code": "NOT_FOUND", "message": "Unknown route"},
        }


def test_routes_are_served_under_api_v1_too(ready):
    ready_v1 = WireClient(ready.transport, ready.user_id, user_key=ready.user_key)
    resp = ready_v1.request("GET", "/api/v1/get-user-key")
    assert resp.status == 200 and resp.data["userKey"] == ready.user_key
    body = json.dumps(encrypt(fixed(), ready.user_key))
    resp = ready_v1.request(
        "POST",
        "/api/v1/schedule-message",
        body=body,
        headers={"X-Payload-Encrypted": "true", "X-Encryption-Version": "1"},
    )
    assert resp.status == 201


# ---- keys, capabilities, init ----------------------------------------------------------------------------------


def test_vapid_public_key_and_capabilities(make_context):
    make_context(AMSG_VAPID_PUBLIC_KEY="")
    client = WireClient(InProcessApi(), user_id=str(uuid.uuid4()))
    resp = client.vapid_public_key()
    assert (resp.status, resp.code) == (503, "VAPID_NOT_CONFIGURED")
    caps = client.capabilities()
    assert caps.status == 200 and caps.body["success"] is True
    assert "vapid-public-key" not in caps.body["features"]
    assert {"user-push-subscription", "get-message-detail", "gzip-request-body"} <= set(caps.body["features"])
    make_context(AMSG_VAPID_PUBLIC_KEY="BKey")
    assert client.vapid_public_key().body == {"success": True, "publicKey": "BKey"}


@pytest.mark.dynamo_store  # the schema check reads the table's description
def test_init_tenant_checks_the_schema(api):
    resp = api.request("POST", "/init-tenant", body="ignored")
    assert resp.status == 200, resp.text
    data = resp.data
    assert data["tenantId"] == "single"
    names = {index["name"]: index["status"] for index in data["schema"]["indexes"]}
    assert names == {
        "due": "success",
        "retention": "success",
        "work": "success",
        "outbox_unacked": "success",
        "outbox_by_task": "success",
        "ttl": "success",
    }


def test_init_tenant_fails_on_a_missing_table(make_context):
    make_context(AMSG_TABLE_NAME="does-not-exist")
    client = WireClient(InProcessApi(), user_id=str(uuid.uuid4()))
    resp = client.request("POST", "/init-tenant")
    assert (resp.status, resp.code) == (500, "INIT_FAILED")


def test_missing_master_key_is_a_config_500_with_cause(make_context):
    make_context(AMSG_MASTER_KEY="")
    client = WireClient(InProcessApi(), user_id=str(uuid.uuid4()))
    resp = client.request("GET", "/get-user-key")
    assert resp.status == 500 and resp.code == "INTERNAL_ERROR"
    assert resp.body["error"]["cause"]["name"] == "ConfigError"


# ---- push subscription ------------------------------------------------------------------------------------------


def test_push_subscription_lifecycle(api):
    assert api.get_subscription().data == {"exists": False, "updatedAt": None, "endpoint": None}
    assert api.put_subscription({"endpoint": "  "}).code == "INVALID_PUSH_SUBSCRIPTION"
    assert api.put_subscription([]).code == "INVALID_PUSH_SUBSCRIPTION"
    assert api.put_subscription(dummy_subscription(), updated_at=0).code == "INVALID_UPDATED_AT"
    assert api.put_subscription(dummy_subscription(), updated_at=1.5).code == "INVALID_UPDATED_AT"
    assert api.put_subscription(dummy_subscription(), updated_at=123).data == {"updatedAt": 123}
    got = api.get_subscription().data
    assert got == {"exists": True, "updatedAt": 123, "endpoint": "https://push.example.test/sub/1"}
    assert "keys" not in json.dumps(got)
    assert api.delete_subscription().data == {"deleted": True}
    assert api.delete_subscription().data == {"deleted": False}


# ---- schedule / list / get / update / cancel ---------------------------------------------------------------------


def test_schedule_requires_a_subscription_and_returns_the_reference_shape(api, ctx):
    assert api.schedule(fixed()).code == "PUSH_SUBSCRIPTION_MISSING"
    api.put_subscription(dummy_subscription())
    given = str(uuid.uuid4())
    resp = api.schedule(fixed(uuid=given))
    assert resp.status == 201
    assert resp.data == {
        "id": 1,
        "uuid": given,
        "contactName": "Rei",
        "nextSendAt": FUTURE,
        "status": "pending",
        "createdAt": "2029-12-31T00:00:00.000Z",
    }
    assert api.schedule(fixed(uuid=given)).code == "TASK_UUID_CONFLICT"
    assert api.schedule(fixed()).data["id"] == 2


def test_uuid_is_unique_across_users(ready, ctx):
    given = str(uuid.uuid4())
    assert ready.schedule(fixed(uuid=given)).status == 201
    other = WireClient(ready.transport, str(uuid.uuid4()))
    other.init()
    other.put_subscription(dummy_subscription())
    resp = other.schedule(fixed(uuid=given))
    assert (resp.status, resp.code) == (409, "TASK_UUID_CONFLICT")
    assert other.schedule(fixed()).data["id"] == 1  # ids are per user


def test_validation_errors_surface_with_codes(ready):
    resp = ready.schedule({"messageType": "fixed"})
    assert (resp.status, resp.code) == (400, "INVALID_PARAMETERS")
    assert resp.body["error"]["details"] == {"missingFields": ["contactName"]}
    assert ready.schedule(fixed(messageType="nope")).code == "INVALID_MESSAGE_TYPE"
    assert ready.schedule(fixed(firstSendTime="2020-01-01T00:00:00Z")).code == "INVALID_TIMESTAMP"
    assert ready.schedule(fixed(tzId="Nowhere/Fake")).body["error"]["details"] == {"invalidFields": ["tzId"]}
    assert ready.schedule(fixed(pushSubscription={})).code == "PUSH_SUBSCRIPTION_NOT_ACCEPTED"
    assert ready.schedule(fixed(splitPattern="(")).body["error"]["details"] == {"invalidFields": ["splitPattern"]}
    assert ready.schedule(fixed(messageType="instant", immediate=True)).code == "INVALID_PARAMETERS"


def test_payload_size_gate(ready):
    resp = ready.schedule(fixed(metadata={"blob": "x" * 1_000_000}))
    assert (resp.status, resp.code) == (400, "TASK_PAYLOAD_TOO_LARGE")
    assert resp.body["error"]["details"]["maxBytes"] == 995871


@pytest.mark.dynamo_store  # the adapter splits the payload across items; the fake keeps it inline
def test_large_payload_round_trips_across_items(ready):
    blob = "名" * 300_000  # ~900 KB of UTF-8: about 1.8 MB of ciphertext, split across items
    created = ready.schedule(fixed(metadata={"blob": blob})).data
    task = ready.get_message(created["uuid"]).data["task"]
    assert task["metadata"]["blob"] == blob
    assert ready.update(created["uuid"], {"userMessage": "changed"}).status == 200
    assert ready.get_message(created["uuid"]).data["task"]["metadata"]["blob"] == blob


def test_list_filters_paginates_and_projects(ready):
    uuids = []
    for day in (3, 1, 2):
        resp = ready.schedule(
            fixed(firstSendTime=f"2030-01-0{day}T00:00:00Z", metadata={"charId": f"c{day}", "amsgClientTaskId": "t"})
        )
        uuids.append(resp.data["uuid"])
    listed = ready.list_messages(limit=2)
    assert listed.body["encrypted"] is True
    data = listed.data
    assert [t["nextSendAt"][:10] for t in data["tasks"]] == ["2030-01-01", "2030-01-02"]
    assert data["pagination"] == {"total": 3, "limit": 2, "offset": 0, "hasMore": True}
    first = data["tasks"][0]
    assert list(first) == [
        "id",
        "uuid",
        "contactName",
        "messageType",
        "messageSubtype",
        "nextSendAt",
        "recurrenceType",
        "tzId",
        "status",
        "retryCount",
        "createdAt",
        "updatedAt",
        "charId",
        "clientTaskId",
        "credRefs",
        "lastError",
    ]
    assert first["charId"] == "c1" and first["clientTaskId"] == "t" and "metadata" not in first
    assert "apiKey" not in json.dumps(data)
    assert ready.list_messages(limit=2, offset=2).data["pagination"]["hasMore"] is False
    assert ready.list_messages(status="failed").data["tasks"] == []
    assert ready.list_messages(limit=500).data["pagination"]["limit"] == 100
    for bad in ("0", "abc", "1.5", "-1"):
        assert ready.list_messages(limit=bad).code == "INVALID_PARAMETERS"
    assert ready.list_messages(offset="x").code == "INVALID_PARAMETERS"


def test_get_message_and_cancel(ready):
    created = ready.schedule(fixed(metadata={"k": 1})).data
    assert ready.get_message(created["uuid"]).data["task"]["metadata"] == {"k": 1}
    assert ready.get_message(str(uuid.uuid4())).code == "TASK_NOT_FOUND"
    assert ready.get_encrypted("/message").code == "TASK_ID_REQUIRED"
    cancelled = ready.cancel(created["uuid"])
    assert cancelled.data["uuid"] == created["uuid"] and cancelled.data["message"] == "任务已成功取消"
    assert ready.cancel(created["uuid"]).status == 404


def test_update_semantics(ready):
    created = ready.schedule(fixed(avatarUrl="https://a.example/1.png", tzId="Asia/Tokyo")).data
    uuid_ = created["uuid"]
    resp = ready.update(
        uuid_,
        {
            "contactName": "Ai",
            "tzId": None,
            "avatarUrl": "data:xx",
            "unknown": 1,
            "nextSendAt": "2030-02-01T00:00:00+08:00",
        },
    )
    assert resp.status == 200, resp.text
    assert resp.data["updatedFields"] == ["contactName", "tzId", "nextSendAt"]
    task = ready.get_message(uuid_).data["task"]
    assert task["contactName"] == "Ai" and task["tzId"] is None
    assert task["nextSendAt"] == "2030-01-31T16:00:00.000Z"
    assert ready.update(uuid_, {"contactName": " "}).code == "INVALID_UPDATE_DATA"
    assert ready.update(str(uuid.uuid4()), {"contactName": "x"}).code == "TASK_NOT_FOUND"


def test_supersede_replaces_atomically(ready):
    old = ready.schedule(fixed()).data
    resp = ready.schedule(fixed(supersedesUuid=old["uuid"]))
    assert resp.status == 201 and resp.data["superseded"] is True
    assert ready.get_message(old["uuid"]).code == "TASK_NOT_FOUND"
    resp = ready.schedule(fixed(supersedesUuid=str(uuid.uuid4())))
    assert resp.data["superseded"] is False


def test_immediate_schedules_now(ready, ctx):
    resp = ready.schedule({"contactName": "Rei", "messageType": "fixed", "userMessage": "x", "immediate": True})
    assert resp.status == 201 and resp.data["nextSendAt"] == "2029-12-31T00:00:00.000Z"
