"""``amsg import --tenant`` from a real PostgreSQL (the reference's pg schema, the connection string taken from the
tenant's config) into DynamoDB Local: every item lands in the tenant's key space, the master key and user keys are
the reference's, and two imports of one tenant racing each other register it exactly once."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest
from amsg.adapters.dynamo.compact import unpack
from amsg.adapters.dynamo.table import DynamoTable
from amsg.adapters.dynamo.tenants import DynamoTenantStore
from amsg.crypto import compact_json, decrypt_payload, derive_user_key, encrypt_for_storage
from amsg.engine.tick import run_tick
from amsg.tenancy.keys import RegistryDirectory, TenantKeys
from amsg_import.command import import_tenant
from amsg_import.sources import open_source
from amsg_import.tenant import TenantConfigError, open_tenant_config, seal_tenant_config

from tests.amsg_import.test_postgres import PG_2_6, PG_TASKS_2_0
from tests.support.ddb_engine import MemoryQueue, RecordingPushSender, consume, ddb_context, with_fakes
from tests.support.fakes.tenants import LocalKeyWrapper
from tests.support.postgres_server import PostgresUnavailable, postgres_server
from tests.support.tenants_stack import scan_all

pytestmark = pytest.mark.ddb_local
KEK = "reference-kek"
TENANT = "5d2e8f61-3a4b-4c7d-8e9f-0a1b2c3d4e5f"
MASTER = "0f" * 32
NOW = 1_900_000_000_000
DUE_MS = 1_893_571_200_000  # 2030-01-02T08:00:00Z, the tasks' next_send_at


@pytest.fixture(scope="module")
def pg_server() -> Iterator[str]:
    try:
        with postgres_server() as url:
            yield url
    except PostgresUnavailable as exc:
        pytest.skip(f"PostgreSQL unavailable: {exc}")


@pytest.fixture
def tenant_db(pg_server: str) -> Iterator[tuple[str, dict[str, dict]]]:
    """The tenant's own reference database: two users, a task each, one subscription."""
    import psycopg

    name = f"amsg_t_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_server, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    url = pg_server.rsplit("/", 1)[0] + "/" + name
    tasks: dict[str, dict] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(PG_TASKS_2_0)
        conn.execute(PG_2_6)
        for n in range(2):
            user, task_uuid = str(uuid.uuid4()), str(uuid.uuid4())
            payload = {"contactName": "Rei", "messageType": "fixed", "userMessage": f"m{n}", "recurrenceType": "none"}
            conn.execute(
                "INSERT INTO scheduled_messages (user_id, uuid, encrypted_payload, message_type, next_send_at, status,"
                " created_at, updated_at) VALUES (%s, %s, %s, 'fixed', '2030-01-02T08:00:00Z', 'pending',"
                " '2030-01-01T00:00:00Z', '2030-01-01T00:00:00Z')",
                (user, task_uuid, encrypt_for_storage(compact_json(payload), derive_user_key(MASTER, user))),
            )
            tasks[user] = {"uuid": task_uuid, "payload": payload}
        sub = {"endpoint": "https://push.example.test/t", "keys": {"p256dh": "k", "auth": "a"}}
        first = next(iter(tasks))
        conn.execute(
            "INSERT INTO push_subscriptions VALUES (%s, %s, %s)",
            (first, encrypt_for_storage(compact_json(sub), derive_user_key(MASTER, first)), NOW - 5),
        )
    yield url, tasks
    with psycopg.connect(pg_server, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


def _config(url: str):
    blob = seal_tenant_config(
        {
            "tenantId": TENANT,
            "db": {"driver": "pg", "connectionString": url},
            "masterKey": MASTER,
            "createdAt": "2026-01-01T00:00:00.000Z",
            "updatedAt": "2026-01-01T00:00:00.000Z",
        },
        KEK,
        uuid.uuid4().bytes[:12],
    )
    return open_tenant_config(blob, KEK, TENANT)


def _run(config, table, registry, wrapper, **kw):
    source = open_source(config.connection_string)  # the database the tenant's config names
    try:
        return import_tenant(config, source, target=(table, registry, wrapper), now_ms=NOW, **kw)
    finally:
        source.close()


def test_tenant_moves_in_from_postgres_under_its_own_key_space(tenant_db, ddb_local_endpoint, ddb_local_table):
    url, tasks = tenant_db
    table = DynamoTable(ddb_local_table, endpoint_url=ddb_local_endpoint, region="us-east-1")
    registry, wrapper = DynamoTenantStore(table), LocalKeyWrapper()
    report = _run(_config(url), table, registry, wrapper)
    assert report.failed == 0, report.render()
    assert report.kinds["tasks"].written == 2 and report.kinds["subscriptions"].written == 1
    record = registry.get(TENANT)
    assert record is not None and wrapper.unwrap(TENANT, record.wrapped_master_key) == MASTER.encode()
    items = scan_all(table.client, ddb_local_table)
    data = [i for i in items if i["PK"]["S"] not in ("TENANTS", "META")]
    assert data and all(i["PK"]["S"].startswith(f"N#{TENANT}#") for i in data)
    assert all(i["due_pk"]["S"].startswith(f"N#{TENANT}#DUE#") for i in data if "due_pk" in i)
    for user, task in tasks.items():
        item = table.get({"PK": f"N#{TENANT}#U#{user}", "SK": f"T#{task['uuid']}"})
        assert item is not None
        assert decrypt_payload(unpack(item["payload"]), derive_user_key(MASTER, user)) == task["payload"]


def test_racing_imports_of_one_tenant_register_it_once(tenant_db, ddb_local_endpoint, ddb_local_table):
    url, _ = tenant_db
    config = _config(url)
    wrapper = LocalKeyWrapper()
    outcomes: list[str] = []
    barrier = threading.Barrier(3)

    def attempt() -> None:
        table = DynamoTable(ddb_local_table, endpoint_url=ddb_local_endpoint, region="us-east-1")
        barrier.wait()
        try:
            outcomes.append(_run(config, table, DynamoTenantStore(table), wrapper).source["tenantRecord"])
        except TenantConfigError as exc:
            outcomes.append(str(exc))

    threads = [threading.Thread(target=attempt) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(o == "created" for o in outcomes) == [False, False, True], outcomes
    assert all("--resume" in o for o in outcomes if o != "created")


def test_the_imported_tenants_due_tasks_are_delivered_by_the_tick(tenant_db, ddb_local_endpoint, ddb_local_table):
    """The tick serves the imported tenant from the shared due index and run_task delivers with its user keys."""
    url, tasks = tenant_db
    table = DynamoTable(ddb_local_table, endpoint_url=ddb_local_endpoint, region="us-east-1")
    registry, wrapper = DynamoTenantStore(table), LocalKeyWrapper()
    assert _run(_config(url), table, registry, wrapper).failed == 0
    ctx = ddb_context(ddb_local_endpoint, ddb_local_table, AMSG_TENANCY="multi", AMSG_KMS_KEY_ID="unused-local-wrapper")
    ctx.tenant_registry, ctx.key_wrapper = registry, wrapper
    ctx.tenant_keys = TenantKeys(registry, wrapper, lambda: 0.0, max_age_s=300)
    ctx.tenants = RegistryDirectory(registry)
    sender, queue = RecordingPushSender(), MemoryQueue()
    with_fakes(ctx, sender, queue)
    ctx.clock.current_ms = DUE_MS + 60_000  # a minute after the tasks' next_send_at (later ones expire as stale)
    assert run_tick(ctx)["claimedTasks"] == 2
    stop = threading.Event()
    stop.set()
    consume(ctx, queue, stop)
    subscribed = next(iter(tasks))  # only this user has a push subscription
    assert [p["taskUuid"] for p in sender.sent] == [tasks[subscribed]["uuid"]]
