"""An imported tenant's pending-task count on DynamoDB Local (docs/import.md): imports of one tenant racing each
other count each pending task once, a re-run adds nothing, and delivering the imported tasks (the real tick,
run_task in SQS batches) brings the count to exactly 0, checked against a scan of the whole table."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from amsg.adapters.dynamo.table import DynamoTable
from amsg.adapters.dynamo.tenants import DynamoTenantStore
from amsg.engine.tick import run_tick
from amsg.tenancy.keys import RegistryDirectory, TenantKeys
from amsg_import.command import import_tenant
from amsg_import.sources import open_source
from amsg_import.tenant import open_tenant_config, seal_tenant_config

from tests.support.ddb_engine import MemoryQueue, RecordingPushSender, consume, ddb_context, with_fakes
from tests.support.fakes.tenants import LocalKeyWrapper
from tests.support.reference_db import ReferenceDb
from tests.support.tenants_stack import pending_scan

pytestmark = pytest.mark.ddb_local
KEK = "reference-kek"
TENANT = "7c1e2d3f-4a5b-4c6d-8e9f-1a2b3c4d5e6f"
MASTER = "3c" * 32
T0 = 1_893_369_600_000
USERS = ["0a8f2c34-5b6d-4e7f-8a9b-0c1d2e3f4a5b", "1b9f3d45-6c7e-4f80-9bac-1d2e3f4a5b6c"]
PENDING, SETTLED = 12, 4


def _source(tmp_path: Path) -> str:
    db = ReferenceDb("outbox", MASTER)
    for n in range(PENDING):
        db.add_task(USERS[n % 2], next_send_ms=T0 + 60_000 + n, message=f"p{n}")
    for n in range(SETTLED):
        db.add_task(USERS[n % 2], next_send_ms=T0 - 60_000, message=f"s{n}", status=("sent", "failed")[n % 2])
    for user in USERS:
        db.add_subscription(user, {"endpoint": f"https://push.example.test/{user}", "keys": {}}, 1)
    path = str(tmp_path / "tenant.sqlite")
    db.save(path)
    return path


def _config():
    config = {"tenantId": TENANT, "db": {"driver": "sqlite"}, "masterKey": MASTER}
    return open_tenant_config(seal_tenant_config(config, KEK, b"\x01" * 12), KEK, TENANT)


def _import(path: str, table: DynamoTable, registry, wrapper):
    source = open_source(path)
    try:
        return import_tenant(_config(), source, target=(table, registry, wrapper), now_ms=T0, resume=True)
    finally:
        source.close()


def scanned(client, table: str) -> tuple[int | None, int]:
    return pending_scan(client, table, TENANT)


def test_the_imported_count_is_exact_through_racing_imports_a_rerun_and_delivery(
    tmp_path, ddb_local_endpoint, ddb_local_table, ddb_local_client
):
    path = _source(tmp_path)
    wrapper = LocalKeyWrapper()
    barrier = threading.Barrier(3)
    written: list[int] = []

    def attempt() -> None:
        table = DynamoTable(ddb_local_table, endpoint_url=ddb_local_endpoint, region="us-east-1")
        barrier.wait()
        written.append(_import(path, table, DynamoTenantStore(table), wrapper).kinds["tasks"].written)

    threads = [threading.Thread(target=attempt) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert sum(written) == PENDING + SETTLED, written  # each task written by exactly one of the racing runs
    assert scanned(ddb_local_client, ddb_local_table) == (PENDING, PENDING)

    table = DynamoTable(ddb_local_table, endpoint_url=ddb_local_endpoint, region="us-east-1")
    registry = DynamoTenantStore(table)
    assert _import(path, table, registry, wrapper).kinds["tasks"].written == 0
    assert scanned(ddb_local_client, ddb_local_table) == (PENDING, PENDING)

    ctx = ddb_context(ddb_local_endpoint, ddb_local_table, AMSG_TENANCY="multi", AMSG_KMS_KEY_ID="unused-local-wrapper")
    ctx.tenant_registry, ctx.key_wrapper = registry, wrapper
    ctx.tenant_keys = TenantKeys(registry, wrapper, lambda: 0.0, max_age_s=300)
    ctx.tenants = RegistryDirectory(registry)
    sender, queue = RecordingPushSender(), MemoryQueue()
    with_fakes(ctx, sender, queue)
    ctx.clock.current_ms = T0 + 120_000
    assert run_tick(ctx)["claimedTasks"] == PENDING
    stop = threading.Event()
    stop.set()
    consume(ctx, queue, stop)  # every record twice, as SQS may redeliver: still decremented once per task
    assert len(sender.sent) == PENDING
    assert scanned(ddb_local_client, ddb_local_table) == (0, 0)
