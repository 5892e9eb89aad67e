"""The cross-tenant attack matrix over every route (moto; docs/tenancy.md).

Tenant A stores something through every kind of route for user U. Tenant B, with the same ``X-User-Id`` and its
own valid token, reads, updates, deletes and lists through every route and never sees, changes or removes A's
data; then every token that is not a valid tenant token of an active tenant (expired, wrong signature, unknown
tenant, revoked, disabled, cron) is refused on every route before it runs.
"""

from __future__ import annotations

import base64
import json
import os
import uuid

import pytest
from amsg.tenancy import lifecycle, tokens

from tests.conftest import T0_MS
from tests.handlers.test_tenancy_auth import BAD_TOKEN, NO_TENANT, ROUTES, _assert_401, _call
from tests.support.tenancy import SIGNING_KEY, build_multi_stack

FIXED = {
    "contactName": "Rei",
    "messageType": "fixed",
    "userMessage": "secret of A",
    "firstSendTime": "2030-06-01T00:00:00Z",
}


def _subscription() -> dict:
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    point = (
        ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)
    )
    b64 = lambda raw: base64.urlsafe_b64encode(raw).rstrip(b"=").decode()  # noqa: E731
    return {"endpoint": "https://push.example.test/a", "keys": {"p256dh": b64(point), "auth": b64(os.urandom(16))}}


NOW_S = T0_MS // 1000


@pytest.fixture
def stack(make_context):
    return build_multi_stack(make_context)


def _seed(client) -> str:
    client.init()
    assert client.put_subscription(_subscription()).status == 200
    task = client.schedule(FIXED)
    assert task.status == 201, task.text
    creds = [
        {"credId": "a/chat", "value": {"apiUrl": "https://llm.example.test", "apiKey": "sk-a", "primaryModel": "m"}}
    ]
    assert client.put_credentials(creds).status == 200
    assert client.put_client_state([{"namespace": "ns", "key": "k", "value": "A", "updatedAt": 1}]).status == 200
    policy = {"quietHours": None, "caps": [{"scope": "user", "max": 5, "windowMinutes": 60}]}
    assert client.put_delivery_policy(policy).status == 200
    return task.data["uuid"]


def _a_view(client, task_uuid: str) -> str:
    """Everything A can read, as one text (B's actions must leave it unchanged)."""
    parts = [
        client.list_messages().body,
        client.get_message(task_uuid).body,
        client.get_subscription().body,
        client.get_credentials().body,
        client.get_client_state("ns").body,
        client.client_state_namespaces().body,
        client.get_delivery_policy().body,
        client.outbox().body,
    ]
    return json.dumps(parts, sort_keys=True)


def test_another_tenants_token_reaches_nothing_of_this_tenant_on_any_route(stack):
    user = str(uuid.uuid4())
    a, b = stack.tenant(), stack.tenant()
    client_a, client_b = stack.client(a["tenantToken"], user), stack.client(b["tenantToken"], user)
    task_uuid = _seed(client_a)
    before = _a_view(client_a, task_uuid)
    assert client_b.init() != client_a.user_key  # the same user id is another user in another tenant

    # reads: B's own, empty view
    assert client_b.list_messages().data["tasks"] == []
    assert client_b.get_message(task_uuid).code == "TASK_NOT_FOUND"
    assert "push.example.test" not in client_b.get_subscription().text
    assert "a/chat" not in client_b.get_credentials().text
    assert "A" not in json.dumps(client_b.get_client_state("ns").data)
    assert client_b.client_state_namespaces().data["namespaces"] == []
    assert "windowMinutes" not in client_b.get_delivery_policy().text
    assert client_b.outbox().data["entries"] == []
    assert "a/chat" not in client_b.request("GET", "/cloud-data/resources").text
    # writes and deletes aimed at A's ids act in B's space only
    assert client_b.update(task_uuid, {"userMessage": "hijacked"}).code == "TASK_NOT_FOUND"
    assert client_b.cancel(task_uuid).code == "TASK_NOT_FOUND"
    client_b.delete_subscription()
    client_b.delete_credentials({"all": True})
    client_b.clear_client_state()
    client_b.delete_delivery_policy()
    client_b.outbox_delete({"all": True})

    assert _a_view(client_a, task_uuid) == before


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_every_invalid_tenant_token_is_refused_on_every_route(stack, method, path):
    revoked, disabled = stack.tenant(), stack.tenant()
    lifecycle.rotate_tokens(stack.ctx, revoked["tenantId"])
    lifecycle.set_status(stack.ctx, disabled["tenantId"], "disabled")
    cases = [
        (tokens.issue(SIGNING_KEY, revoked["tenantId"], tokens.TENANT, NOW_S - 2_592_000), BAD_TOKEN),  # expired
        (tokens.issue("not-the-signing-key", revoked["tenantId"], tokens.TENANT, NOW_S), BAD_TOKEN),
        (revoked["tenantToken"], BAD_TOKEN),  # issued before the rotation
        (revoked["cronToken"], BAD_TOKEN),  # a cron token on a business route
        (tokens.issue(SIGNING_KEY, str(uuid.uuid4()), tokens.TENANT, NOW_S), NO_TENANT),  # unknown tenant
        (disabled["tenantToken"], NO_TENANT),
    ]
    for token, message in cases:
        _assert_401(_call(stack, method, path, {"Authorization": f"Bearer {token}"}), message)
