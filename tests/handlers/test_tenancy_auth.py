"""Authentication at the edge of the multi-tenant line: every failure is 401 INVALID_TENANT_AUTH with the
reference's message, checked before the route runs (moto; docs/tenancy.md)."""

from __future__ import annotations

import uuid

import pytest
from amsg.tenancy import lifecycle, tokens

from tests.conftest import T0_MS
from tests.support.tenancy import SIGNING_KEY, build_multi_stack

NO_TOKEN = "缺少租户鉴权信息"
BAD_TOKEN = "租户令牌无效或已过期"
NO_TENANT = "租户配置不存在或已失效"
NOW_S = T0_MS // 1000
# one request per function of the line, each answering 401 before it reads anything of its own
ROUTES = [
    ("GET", "/api/v1/get-user-key"),
    ("POST", "/api/v1/schedule-message"),
    ("PUT", "/api/v1/update-message?id=x"),
    ("DELETE", "/api/v1/cancel-message?id=x"),
    ("GET", "/api/v1/messages"),
    ("GET", "/api/v1/message?id=x"),
    ("GET", "/api/v1/push-subscription"),
    ("PUT", "/api/v1/llm-credentials"),
    ("GET", "/api/v1/capabilities"),
    ("GET", "/api/v1/vapid-public-key"),
    ("GET", "/api/v1/outbox"),
    ("POST", "/api/v1/outbox/ack"),
    ("GET", "/api/v1/client-state?namespace=n"),
    ("GET", "/api/v1/client-state/namespaces"),
    ("GET", "/api/v1/delivery-policy"),
    ("GET", "/api/v1/cloud-data/inventory"),
    ("GET", "/get-user-key"),  # the root prefix is the same route
]


@pytest.fixture
def stack(make_context):
    return build_multi_stack(make_context)


def _call(stack, method: str, path: str, headers: dict[str, str] | None = None):
    client = stack.client(None)
    return client.request(method, path, headers=headers or {}, body="{}" if method != "GET" else None)


def _assert_401(resp, message: str) -> None:
    assert (resp.status, resp.code) == (401, "INVALID_TENANT_AUTH"), resp.text
    assert resp.body["error"]["message"] == message


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_every_business_route_needs_a_tenant_token(stack, method, path):
    tenant = stack.tenant()
    _assert_401(_call(stack, method, path), NO_TOKEN)
    _assert_401(_call(stack, method, path, {"Authorization": f"Basic {tenant['tenantToken']}"}), NO_TOKEN)
    _assert_401(_call(stack, method, path, {"Authorization": f"Bearer {tenant['cronToken']}"}), BAD_TOKEN)
    # ?token= is for send-notifications only
    sep = "&" if "?" in path else "?"
    _assert_401(_call(stack, method, f"{path}{sep}token={tenant['tenantToken']}"), NO_TOKEN)


@pytest.mark.parametrize(
    "token",
    [
        "garbage",
        "a.b.c",
        tokens.issue("another-signing-key", str(uuid.uuid4()), tokens.TENANT, NOW_S),
        tokens.issue(SIGNING_KEY, str(uuid.uuid4()), tokens.TENANT, NOW_S - 2_592_000),  # exp == now
        tokens.issue(SIGNING_KEY, str(uuid.uuid4()), tokens.TENANT, NOW_S, lifetime_s=-1),
        "x" * 5000,
    ],
)
def test_bad_tokens_are_refused(stack, token):
    _assert_401(_call(stack, "GET", "/api/v1/messages", {"Authorization": f"Bearer {token}"}), BAD_TOKEN)


def test_a_valid_token_of_an_unknown_tenant_is_refused(stack):
    token = tokens.issue(SIGNING_KEY, str(uuid.uuid4()), tokens.TENANT, NOW_S)
    _assert_401(_call(stack, "GET", "/api/v1/messages", {"Authorization": f"Bearer {token}"}), NO_TENANT)


def test_a_disabled_tenant_is_refused_and_enabled_again(stack):
    tenant = stack.tenant()
    lifecycle.set_status(stack.ctx, tenant["tenantId"], "disabled")
    auth = {"Authorization": f"Bearer {tenant['tenantToken']}"}
    _assert_401(_call(stack, "GET", "/api/v1/get-user-key", auth), NO_TENANT)
    lifecycle.set_status(stack.ctx, tenant["tenantId"], "deleting")
    _assert_401(_call(stack, "GET", "/api/v1/get-user-key", auth), NO_TENANT)


def test_rotation_revokes_every_earlier_token_at_once(stack):
    tenant = stack.tenant()
    fresh = lifecycle.rotate_tokens(stack.ctx, tenant["tenantId"])
    assert fresh["tenantToken"] != tenant["tenantToken"]
    for old in (tenant["tenantToken"], tenant["cronToken"]):
        _assert_401(_call(stack, "GET", "/api/v1/messages", {"Authorization": f"Bearer {old}"}), BAD_TOKEN)
    record = stack.ctx.tenant_registry.get(tenant["tenantId"])
    assert record.token_generation == 2 and record.tokens_not_before_s == NOW_S + 1


def test_authentication_runs_before_the_body_is_checked(stack):
    resp = stack.client(None).request("POST", "/api/v1/schedule-message", body="not json")
    _assert_401(resp, NO_TOKEN)


def test_send_notifications_takes_only_cron_tokens(stack):
    tenant = stack.tenant()
    client = stack.client(None)
    _assert_401(client.request("POST", "/api/v1/send-notifications", user=False), NO_TOKEN)
    bearer = {"Authorization": f"Bearer {tenant['tenantToken']}"}
    _assert_401(client.request("POST", "/api/v1/send-notifications", headers=bearer, user=False), BAD_TOKEN)
    query = f"/api/v1/send-notifications?token={tenant['tenantToken']}"
    _assert_401(client.request("POST", query, user=False), BAD_TOKEN)
    lifecycle.set_status(stack.ctx, tenant["tenantId"], "disabled")
    cron = f"/api/v1/send-notifications?token={tenant['cronToken']}"
    _assert_401(client.request("POST", cron, user=False), NO_TENANT)


def test_send_notifications_is_not_a_route_of_the_single_line(ctx, api):
    resp = api.request("POST", "/api/v1/send-notifications", user=False)
    assert (resp.status, resp.code) == (404, "NOT_FOUND")


def test_the_single_line_ignores_bearer_tokens(ctx, api):
    resp = api.request("GET", "/get-user-key", headers={"Authorization": "Bearer whatever"})
    assert resp.status == 200


def test_a_tenant_over_its_request_rate_gets_429_with_retry_after(make_context):
    from tests.support.tenancy import build_multi_stack as build

    stack = build(make_context, AMSG_TENANT_RATE_LIMIT_RPS="3")
    a, b = stack.tenant(), stack.tenant()
    user = str(uuid.uuid4())
    client_a, client_b = stack.client(a["tenantToken"], user), stack.client(b["tenantToken"], user)
    statuses = [client_a.request("GET", "/api/v1/get-user-key").status for _ in range(4)]
    assert statuses == [200, 200, 200, 429]
    limited = client_a.request("GET", "/api/v1/get-user-key")
    assert (limited.status, limited.code, limited.headers.get("retry-after")) == (429, "TENANT_RATE_LIMITED", "1")
    assert limited.body["error"]["details"] == {"limit": 3, "windowSeconds": 1}
    assert client_b.request("GET", "/api/v1/get-user-key").status == 200  # another tenant has its own window
    stack.ctx.clock.current_ms += 1000  # the next second is a new window
    assert client_a.request("GET", "/api/v1/get-user-key").status == 200
    # a tenant's own limit overrides the deployment's
    stack.ctx.tenant_registry.set_rate_limit(b["tenantId"], 0, stack.ctx.now_ms())
    assert all(client_b.request("GET", "/api/v1/get-user-key").status == 200 for _ in range(5))


def test_capabilities_say_what_the_multi_tenant_line_offers(stack):
    tenant = stack.tenant()
    resp = stack.client(tenant["tenantToken"]).capabilities()
    features = resp.body["features"]
    assert {"multi-tenant", "tenant-token-revocation", "tenant-rate-limit", "message-outbox"} <= set(features)
    assert "schema-self-check" not in features  # init-tenant creates tenants here


def test_the_single_line_does_not_advertise_tenancy(api):
    features = api.capabilities().body["features"]
    assert "multi-tenant" not in features and "schema-self-check" in features


def _without_iat(tenant_id: str, token_type: str, exp_s: int, **extra: object) -> str:
    """A token as another minter may write it, with only what the reference asks (``tid``, ``typ``, ``exp``,
    ``v``): built here independently of ``tokens.issue``."""
    import base64
    import hashlib
    import hmac
    import json

    def b64(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")

    payload = {"tid": tenant_id, "typ": token_type, "exp": exp_s, "v": 1, **extra}
    head = b64(b'{"alg":"HS256","typ":"JWT"}') + "." + b64(json.dumps(payload, separators=(",", ":")).encode())
    return head + "." + b64(hmac.new(SIGNING_KEY.encode(), head.encode(), hashlib.sha256).digest())


@pytest.mark.parametrize("extra", [{}, {"iat": "yesterday"}, {"iat": None}], ids=["absent", "string", "null"])
def test_a_token_without_iat_works_until_the_first_rotation(stack, extra):
    """The reference accepts a token without ``iat``; it counts as issued when the tenant was created, so a
    rotation (which only moves ``tokens_not_before`` forward) revokes it like every earlier token."""
    tenant = stack.tenant()
    token = _without_iat(tenant["tenantId"], tokens.TENANT, NOW_S + 3600, **extra)
    assert _call(stack, "GET", "/api/v1/get-user-key", {"Authorization": f"Bearer {token}"}).status == 200
    cron = _without_iat(tenant["tenantId"], tokens.CRON, NOW_S + 3600)
    resp = stack.client(None).request("POST", f"/api/v1/send-notifications?token={cron}", user=False)
    assert resp.code == "VAPID_CONFIG_ERROR", resp.text  # past the gate (this context has no VAPID pair)
    fresh = lifecycle.rotate_tokens(stack.ctx, tenant["tenantId"])
    _assert_401(_call(stack, "GET", "/api/v1/get-user-key", {"Authorization": f"Bearer {token}"}), BAD_TOKEN)
    resp = stack.client(None).request("POST", f"/api/v1/send-notifications?token={cron}", user=False)
    _assert_401(resp, BAD_TOKEN)
    # minted after the rotation but still without iat: it cannot show it is newer, so it stays refused
    again = _without_iat(tenant["tenantId"], tokens.TENANT, NOW_S + 7200)
    _assert_401(_call(stack, "GET", "/api/v1/get-user-key", {"Authorization": f"Bearer {again}"}), BAD_TOKEN)
    fresh_auth = {"Authorization": f"Bearer {fresh['tenantToken']}"}
    assert _call(stack, "GET", "/api/v1/get-user-key", fresh_auth).status == 200


def test_a_moved_in_tenants_token_without_iat_works_until_its_first_rotation(stack):
    """A tenant moved in from the reference (``tokens_not_before`` 0) keeps the reference's tokens, with or
    without ``iat``, until it is rotated here."""
    tenant_id = str(uuid.uuid4())
    lifecycle.create(stack.ctx, tenant_id, tokens_not_before_s=0)
    token = _without_iat(tenant_id, tokens.TENANT, NOW_S + 3600)
    assert _call(stack, "GET", "/api/v1/get-user-key", {"Authorization": f"Bearer {token}"}).status == 200
    lifecycle.rotate_tokens(stack.ctx, tenant_id)
    _assert_401(_call(stack, "GET", "/api/v1/get-user-key", {"Authorization": f"Bearer {token}"}), BAD_TOKEN)
