"""``POST /api/v1/send-notifications`` with a tenant's cron token: the tenant's due work only, the reference's
summary shape, the token in the header or the query (moto; docs/tenancy.md)."""

from __future__ import annotations

import uuid

from tests.conftest import T0_MS
from tests.handlers.test_tenant_isolation import FIXED, _tenant, multi  # noqa: F401  (the fixture)
from tests.support.wire_client import WireClient

SUMMARY_KEYS = {"totalTasks", "successCount", "failedCount", "processedAt", "executionTime", "details"}


def _cron(multi, token: str, *, query: bool) -> object:  # noqa: F811
    from tests.support.tenants_stack import v1

    client = WireClient(v1(multi.api), user_id="-")
    if query:
        return client.request("POST", f"/send-notifications?token={token}", user=False)
    return client.request("POST", "/send-notifications", headers={"Authorization": f"bearer {token}"}, user=False)


def test_send_notifications_runs_only_the_cron_tenants_due_work(multi):  # noqa: F811
    user_id = str(uuid.uuid4())
    a, b = _tenant(multi, user_id), _tenant(multi, user_id)
    for tenant, text in ((a, "for A"), (b, "for B")):
        assert tenant.client.schedule({**FIXED, "userMessage": text}).status == 201
    registry = multi.ctx.tenant_registry
    assert registry.usage(a.id, 1)["pendingTasks"] == registry.usage(b.id, 1)["pendingTasks"] == 1
    multi.ctx.clock.current_ms = T0_MS + 86_401_000  # just after firstSendTime

    resp = _cron(multi, a.cron, query=True)
    assert resp.status == 200, resp.text
    assert set(resp.data) == SUMMARY_KEYS and resp.data["successCount"] == 1
    multi.harness.drain()
    assert [r.endpoint_id for r in multi.push.received] == [a.sub.endpoint.rstrip("/").rsplit("/", 1)[-1]]
    assert b.client.list_messages().data["tasks"][0]["status"] == "pending"  # B's task was not touched
    assert (registry.usage(a.id, 1)["pendingTasks"], registry.usage(b.id, 1)["pendingTasks"]) == (0, 1)

    resp = _cron(multi, b.cron, query=False)  # the header, case-insensitive "bearer"
    assert resp.status == 200 and resp.data["successCount"] == 1
    multi.harness.drain()
    assert len(multi.push.received) == 2
    again = _cron(multi, a.cron, query=True)
    assert again.status == 200 and again.data["totalTasks"] == 0  # nothing left due for A


def test_send_notifications_without_vapid_is_the_references_500(multi):  # noqa: F811
    a = _tenant(multi, str(uuid.uuid4()))
    multi.ctx.settings = type(multi.ctx.settings)(**{**multi.ctx.settings.__dict__, "vapid_public_key": ""})
    multi.ctx.delivery.make_push_sender = lambda: None
    resp = _cron(multi, a.cron, query=True)
    assert (resp.status, resp.code) == (500, "VAPID_CONFIG_ERROR")
    assert resp.body["error"]["message"] == "VAPID 配置缺失，无法发送推送通知"
    assert "NEXT_PUBLIC_VAPID_PUBLIC_KEY" in resp.body["error"]["details"]["missingKeys"]
