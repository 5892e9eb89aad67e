"""``POST /api/v1/init-tenant`` on the multi-tenant line: every code, the 201 answer, keys at rest (moto: DynamoDB
and KMS; docs/tenancy.md)."""

from __future__ import annotations

import hashlib
import uuid

import pytest
from amsg.tenancy import tokens

from tests.conftest import T0_MS, TABLE, moto_table_resource
from tests.support.tenancy import BASE_URL, SIGNING_KEY, build_multi_stack


@pytest.fixture
def stack(make_context):
    return build_multi_stack(make_context)


def _scan() -> list[dict]:
    return moto_table_resource(TABLE).scan()["Items"]


def test_a_tenant_is_created_with_the_references_answer(stack):
    tenant_id = str(uuid.uuid4())
    resp = stack.init_tenant({"tenantId": tenant_id})
    assert resp.status == 201, resp.text
    data = resp.data
    assert set(data) == {"tenantId", "tenantToken", "cronToken", "cronWebhookUrl", "masterKeyFingerprint"}
    assert data["tenantId"] == tenant_id
    now_s = T0_MS // 1000
    tenant = tokens.verify(SIGNING_KEY, data["tenantToken"], now_s, frozenset({tokens.TENANT}))
    cron = tokens.verify(SIGNING_KEY, data["cronToken"], now_s, frozenset({tokens.CRON}))
    assert tenant.tenant_id == cron.tenant_id == tenant_id
    assert tenant.expires_at_s - tenant.issued_at_s == 2_592_000 and tenant.issued_at_s == now_s
    assert data["cronWebhookUrl"] == f"{BASE_URL}/api/v1/send-notifications?token={data['cronToken']}"
    master_key = stack.ctx.tenant_keys.master_key(tenant_id)
    assert master_key is not None and len(master_key) == 64 and master_key == master_key.lower()
    assert data["masterKeyFingerprint"] == hashlib.sha256(master_key.encode()).hexdigest()[:16]


def test_the_stored_record_never_holds_the_plaintext_key(stack):
    data = stack.tenant()
    master_key = stack.ctx.tenant_keys.master_key(data["tenantId"])
    (item,) = [i for i in _scan() if i["PK"] == "TENANTS"]
    assert item["SK"] == data["tenantId"] and item["status"] == "active"
    assert all(master_key not in str(value) for value in item.values())
    assert all(bytes.fromhex(master_key) not in str(value).encode() for value in item.values())


def test_an_empty_body_or_only_our_driver_creates_a_tenant_with_a_random_id(stack):
    for body in (None, {}, {"driver": "dynamodb"}):
        resp = stack.init_tenant(body)
        assert resp.status == 201, resp.text
        assert uuid.UUID(resp.data["tenantId"]).version == 4


def test_without_a_public_base_url_the_webhook_url_is_empty(make_context):
    stack = build_multi_stack(make_context, AMSG_PUBLIC_BASE_URL="")
    assert stack.tenant()["cronWebhookUrl"] == ""


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ("{", 400, "INVALID_JSON"),
        ("[]", 400, "INVALID_REQUEST_BODY"),
        ('"x"', 400, "INVALID_REQUEST_BODY"),
        ({"tenantId": "not-a-uuid"}, 400, "INVALID_TENANT_ID"),
        ({"tenantId": 7}, 400, "INVALID_TENANT_ID"),
        ({"tenantId": "11111111-1111-1111-8111-111111111111"}, 400, "INVALID_TENANT_ID"),  # v1, not v4
        ({"driver": "pg"}, 400, "INVALID_DRIVER"),
        ({"driver": "neon", "databaseUrl": "postgres://x"}, 400, "DATABASE_URL_NOT_SUPPORTED"),
        ({"databaseUrl": "postgres://x"}, 400, "DATABASE_URL_NOT_SUPPORTED"),
        ({"connectionString": "postgres://x"}, 400, "DATABASE_URL_NOT_SUPPORTED"),
        ({"driver": "dynamodb", "databaseUrl": ""}, 400, "DATABASE_URL_NOT_SUPPORTED"),
    ],
)
def test_bad_bodies_answer_the_spec_codes(stack, body, status, code):
    resp = stack.init_tenant(body)
    assert (resp.status, resp.code) == (status, code), resp.text
    assert [i for i in _scan() if i["PK"] == "TENANTS"] == []


def test_messages_are_the_references(stack):
    assert stack.init_tenant("{").body["error"]["message"] == "请求体不是有效的 JSON"
    assert stack.init_tenant("[]").body["error"]["message"] == "请求体格式无效"
    assert stack.init_tenant({"tenantId": "x"}).body["error"]["message"] == "tenantId 必须是 UUID v4 格式"
    assert stack.init_tenant(secret="nope").body["error"]["message"] == "初始化鉴权失败"


@pytest.mark.parametrize("secret", [None, "", "wrong", "test-init-secre"])
def test_the_init_secret_is_required_before_the_body_is_read(stack, secret):
    resp = stack.init_tenant("{", secret=secret)
    assert (resp.status, resp.code) == (401, "INVALID_INIT_AUTH")


def test_the_init_secret_is_trimmed(stack):
    assert stack.init_tenant(None, secret="  test-init-secret ").status == 201


def test_without_a_configured_init_secret_init_tenant_is_closed(make_context):
    stack = build_multi_stack(make_context, AMSG_INIT_SECRET="")
    for secret in (None, "", "anything"):
        assert stack.init_tenant(None, secret=secret).code == "INVALID_INIT_AUTH"


def test_an_existing_tenant_id_is_409_and_keeps_its_key(stack):
    tenant_id = str(uuid.uuid4())
    first = stack.tenant(tenant_id)
    again = stack.init_tenant({"tenantId": tenant_id.upper()})  # ids are compared lower-cased
    assert (again.status, again.code) == (409, "TENANT_ALREADY_INITIALIZED")
    assert again.body["error"]["message"] == "tenantId 已存在，不能重复初始化"
    key = stack.ctx.tenant_keys.master_key(tenant_id)
    assert hashlib.sha256(key.encode()).hexdigest()[:16] == first["masterKeyFingerprint"]


def test_a_wrapped_key_copied_to_another_tenant_does_not_unwrap(stack):
    a, b = stack.tenant(), stack.tenant()
    table = moto_table_resource(TABLE)
    item_a = table.get_item(Key={"PK": "TENANTS", "SK": a["tenantId"]})["Item"]
    table.update_item(
        Key={"PK": "TENANTS", "SK": b["tenantId"]},
        UpdateExpression="SET wrapped_key = :w",
        ExpressionAttributeValues={":w": item_a["wrapped_key"]},
    )
    assert stack.ctx.tenant_keys.master_key(a["tenantId"]) is not None
    assert stack.ctx.tenant_keys.master_key(b["tenantId"]) is None


def test_single_mode_keeps_the_schema_check(ctx, api):
    resp = api.request("POST", "/api/v1/init-tenant", user=False)
    assert resp.status == 200 and resp.data["tenantId"] == "single"


def test_a_snapstart_restore_forgets_every_unwrapped_tenant_key(stack):
    """The unwrapped keys live in the context, which the restore hook drops: a restored sandbox unwraps anew."""
    from amsg import runtime, snapstart

    tenant_id = stack.tenant()["tenantId"]
    before = runtime.app_context()
    assert before.tenant_keys.master_key(tenant_id) is not None
    assert before.tenant_keys._cache  # the key is cached in this context
    snapstart.after_restore()
    assert runtime._current is None  # the next request builds a new context, with an empty cache
