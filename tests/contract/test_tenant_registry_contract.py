"""The tenant registry's contract on the in-memory fake, on moto and on DynamoDB Local (docs/tenancy.md)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from amsg.ports.tenants import TenantExists, TenantNotFound, TenantRecord

from tests.contract.conftest import BACKENDS
from tests.support.fakes.tenants import MemoryTenantStore


@pytest.fixture(params=BACKENDS)
def registry(request: pytest.FixtureRequest) -> Iterator[Any]:
    from amsg.adapters.dynamo.table import DynamoTable
    from amsg.adapters.dynamo.tenants import DynamoTenantStore

    if request.param == "memory":
        yield MemoryTenantStore()
    elif request.param == "moto":
        yield DynamoTenantStore(DynamoTable(request.getfixturevalue("moto_table")))
    else:
        table = request.getfixturevalue("ddb_local_table")
        yield DynamoTenantStore(DynamoTable(table, endpoint_url=request.getfixturevalue("ddb_local_endpoint")))


def _record(tenant_id: str, **changes: Any) -> TenantRecord:
    fields: dict[str, Any] = {
        "tenant_id": tenant_id,
        "wrapped_master_key": "d3JhcHBlZA==",
        "token_generation": 1,
        "status": "active",
        "created_at_ms": 1_000,
        "updated_at_ms": 1_000,
        "tokens_not_before_s": 1,
        "master_key_fingerprint": "0123456789abcdef",
    }
    fields.update(changes)
    return TenantRecord(**fields)


def test_create_then_get_round_trips_and_a_second_create_loses(registry):
    record = _record("t-1")
    registry.create(record)
    assert registry.get("t-1") == record
    with pytest.raises(TenantExists):
        registry.create(_record("t-1", wrapped_master_key="b3RoZXI="))
    assert registry.get("t-1") == record
    assert registry.get("t-unknown") is None


def test_status_and_rotation_update_the_record(registry):
    registry.create(_record("t-2"))
    disabled = registry.set_status("t-2", "disabled", 2_000)
    assert (disabled.status, disabled.updated_at_ms) == ("disabled", 2_000)
    rotated = registry.rotate_tokens("t-2", 50, 3_000)
    assert (rotated.token_generation, rotated.tokens_not_before_s, rotated.updated_at_ms) == (2, 50, 3_000)
    assert rotated.status == "disabled" and registry.get("t-2") == rotated
    with pytest.raises(TenantNotFound):
        registry.set_status("t-none", "active", 1)
    with pytest.raises(TenantNotFound):
        registry.rotate_tokens("t-none", 1, 1)
    assert registry.get("t-none") is None  # a failed update creates nothing


def test_listing_pages_through_every_tenant_once(registry):
    ids = {f"t-{i:02d}" for i in range(7)}
    for tenant_id in ids:
        registry.create(_record(tenant_id))
    seen: list[str] = []
    cursor = None
    for _ in range(20):
        page = registry.list_page(cursor, 3)
        assert len(page.records) <= 3
        seen += [record.tenant_id for record in page.records]
        cursor = page.cursor
        if cursor is None:
            break
    assert sorted(seen) == sorted(ids)


def test_request_windows_count_up_to_the_limit_per_tenant_and_second(registry):
    tenant = "11111111-1111-4111-8111-111111111111"
    other = "22222222-2222-4222-8222-222222222222"
    assert [registry.count_request(tenant, 100, 2) for _ in range(3)] == [True, True, False]
    assert registry.count_request(other, 100, 2) and registry.count_request(tenant, 101, 2)


def test_a_tenants_rate_limit_is_set_and_cleared(registry):
    registry.create(_record("t-3"))
    assert registry.set_rate_limit("t-3", 7, 5).rate_limit_rps == 7
    assert registry.get("t-3").rate_limit_rps == 7
    assert registry.set_rate_limit("t-3", None, 6).rate_limit_rps is None
    with pytest.raises(TenantNotFound):
        registry.set_rate_limit("t-none", 1, 1)
