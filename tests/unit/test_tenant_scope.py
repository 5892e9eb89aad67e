"""A tenant's scoped context: the same API, the tenant's master key and key space, none of the deployment's
secrets that are not the tenant's; queue messages carry the tenant and refuse a malformed one."""

from __future__ import annotations

import json

import pytest
from amsg.clock import FixedClock
from amsg.config import ConfigError, Secrets, Settings
from amsg.context import AppContext, DeliveryPorts, StoragePorts
from amsg.crypto import derive_user_key
from amsg.engine.messages import TaskMessage, parse_task_message
from amsg.tenancy import scope
from amsg.tenancy.scope import scoped_context, tenant_of

DEPLOYMENT_SECRETS = {
    "master_key": "a" * 64,
    "client_token": "shared-token",
    "vapid_private_key": "vapid",
    "tenant_token_signing_key": "signing",
    "init_secret": "init",
}


def _ports(tenant: str | None, built: list[str | None]) -> StoragePorts:
    built.append(tenant)
    ports = StoragePorts(
        tasks=object(),  # type: ignore[arg-type]
        claims=object(),  # type: ignore[arg-type]
        subscriptions=object(),  # type: ignore[arg-type]
        outbox=object(),  # type: ignore[arg-type]
        schema=object(),  # type: ignore[arg-type]
        credentials=object(),  # type: ignore[arg-type]
        client_state=object(),  # type: ignore[arg-type]
    )
    if tenant is None:
        ports.for_tenant = lambda tenant_id: _ports(tenant_id, built)
    return ports


def _deployment(built: list[str | None]) -> AppContext:
    return AppContext(
        settings=Settings(table_name="t", tenancy="multi"),
        secrets=Secrets(DEPLOYMENT_SECRETS.get),
        clock=FixedClock(0),
        delivery=DeliveryPorts(make_push_sender=lambda: None, make_llm=lambda: None, make_queue=lambda: None),  # type: ignore[arg-type,return-value]
        storage=lambda: _ports(None, built),
        optional_ports=frozenset({"owners"}),
    )


def test_a_scoped_context_has_the_tenants_key_and_none_of_the_deployments_other_secrets():
    ctx = _deployment([])
    tenant_key = "b" * 64
    scoped = scoped_context(ctx, "tenant-1", tenant_key)
    assert tenant_of(scoped) == "tenant-1" and tenant_of(ctx) is None
    assert scoped.secrets.master_key == tenant_key
    assert scoped.user_key("u") == derive_user_key(tenant_key, "u") != ctx.user_key("u")
    assert scoped.secrets.client_token is None
    assert scoped.secrets.init_secret is None
    with pytest.raises(ConfigError):
        _ = scoped.secrets.tenant_token_signing_key
    assert scoped.secrets.vapid_private_key == "vapid"  # the deployment's push identity is shared
    assert scoped.provides("owners") and not scoped.provides("cloud_data")
    with pytest.raises(ConfigError):
        scoped_context(scoped, "tenant-2", tenant_key)  # never re-scoped into another tenant


def test_a_lazy_key_is_read_on_use_and_an_unreadable_one_fails_like_an_unset_one():
    ctx = _deployment([])
    reads = []
    scoped = scoped_context(ctx, "tenant-1", lambda: reads.append(1) or None)
    assert reads == []
    with pytest.raises(ConfigError):
        _ = scoped.secrets.master_key
    assert reads == [1]


def test_tenants_ports_are_built_once_per_tenant_and_bounded(monkeypatch):
    built: list[str | None] = []
    ctx = _deployment(built)
    first = scoped_context(ctx, "tenant-1", "b" * 64).storage
    again = scoped_context(ctx, "tenant-1", "b" * 64).storage
    assert first is again and built == [None, "tenant-1"]
    monkeypatch.setattr(scope, "CACHED_TENANTS", 2)
    for tenant in ("tenant-2", "tenant-3"):
        _ = scoped_context(ctx, tenant, "b" * 64).storage
    _ = scoped_context(ctx, "tenant-1", "b" * 64).storage  # dropped as the least recently used: built again
    assert built.count("tenant-1") == 2


def test_a_storage_without_a_shared_table_cannot_be_scoped():
    ctx = _deployment([])
    ctx.storage.for_tenant = None
    with pytest.raises(ConfigError):
        _ = scoped_context(ctx, "tenant-1", "b" * 64).tasks


def test_queue_messages_carry_the_tenant_and_refuse_a_malformed_one():
    message = TaskMessage("u", "x", 1, "2030-01-01T00:00:00.000Z", tenant_id="tenant-1")
    body = message.to_body()
    assert body["tenantId"] == "tenant-1"
    assert parse_task_message(json.dumps(body)) == message
    assert "tenantId" not in TaskMessage("u", "x", 1, "2030-01-01T00:00:00.000Z").to_body()
    for bad in ("", "a#b", 7, "x" * 129):
        assert parse_task_message(json.dumps({**body, "tenantId": bad})) is None
