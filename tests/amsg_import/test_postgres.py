"""The Postgres source on a real PostgreSQL with the reference's pg/neon schema (two versions: before and after
the lease/back-off/last-error columns and the subscription and credential tables), imported into DynamoDB Local
and read back through the API handlers."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from amsg import runtime
from amsg.adapters.dynamo.table import DynamoTable
from amsg.crypto import compact_json, derive_user_key, encrypt_for_storage
from amsg_import.command import run_import
from amsg_import.sources import PostgresSource

from tests.support.ddb_engine import MASTER_KEY, T0_MS, ddb_context
from tests.support.inprocess import InProcessApi
from tests.support.postgres_server import PostgresUnavailable, postgres_server
from tests.support.wire_client import WireClient

pytestmark = pytest.mark.ddb_local
NOW = T0_MS + 86_400_000

PG_TASKS_2_0 = """
CREATE TABLE scheduled_messages (
  id SERIAL PRIMARY KEY,
  user_id VARCHAR(255) NOT NULL,
  uuid VARCHAR(36),
  encrypted_payload TEXT NOT NULL,
  message_type VARCHAR(50) NOT NULL CHECK (message_type IN ('fixed', 'prompted', 'auto', 'instant')),
  next_send_at TIMESTAMP WITH TIME ZONE NOT NULL,
  status VARCHAR(50) NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'failed')),
  retry_count INTEGER DEFAULT 0,
  created_at TIMESTAMP WITH TIME ZONE DEFAULT NOW(),
  updated_at TIMESTAMP WITH TIME ZONE DEFAULT NOW()
);
CREATE UNIQUE INDEX uidx_uuid ON scheduled_messages (uuid) WHERE uuid IS NOT NULL;
"""
PG_2_6 = """
ALTER TABLE scheduled_messages ADD COLUMN IF NOT EXISTS lease_until TIMESTAMPTZ;
ALTER TABLE scheduled_messages ADD COLUMN IF NOT EXISTS retry_after TIMESTAMPTZ;
ALTER TABLE scheduled_messages ADD COLUMN IF NOT EXISTS serialize_group VARCHAR(64);
ALTER TABLE scheduled_messages ADD COLUMN IF NOT EXISTS last_error TEXT;
CREATE TABLE push_subscriptions (
  user_id VARCHAR(255) PRIMARY KEY, subscription TEXT NOT NULL, updated_at BIGINT NOT NULL
);
CREATE TABLE llm_credentials (
  user_id VARCHAR(255) NOT NULL, cred_id VARCHAR(128) NOT NULL, encrypted_value TEXT NOT NULL,
  created_at TEXT NOT NULL, updated_at TEXT NOT NULL, PRIMARY KEY (user_id, cred_id)
);
"""


@pytest.fixture(scope="module")
def pg_server() -> Iterator[str]:
    try:
        with postgres_server() as url:
            yield url
    except PostgresUnavailable as exc:
        pytest.skip(f"PostgreSQL unavailable: {exc}")


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """A fresh database per test on the shared server."""
    import psycopg

    name = f"amsg_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_server, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    yield pg_server.rsplit("/", 1)[0] + "/" + name
    with psycopg.connect(pg_server, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.mark.parametrize("version", ["2.0", "2.6"])
def test_postgres_reference_imports_and_reads_back(version, pg_url, ddb_local_endpoint, ddb_local_table):
    import psycopg

    user = str(uuid.uuid4())
    key = derive_user_key(MASTER_KEY, user)
    sub = {"endpoint": "https://push.example.test/pg", "keys": {"p256dh": "k", "auth": "a"}}
    payload = {"contactName": "Rei", "messageType": "fixed", "userMessage": "从 Postgres 来", "recurrenceType": "none"}
    if version == "2.0":
        payload["pushSubscription"] = sub
    task_uuid = str(uuid.uuid4())
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(PG_TASKS_2_0)
        if version == "2.6":
            conn.execute(PG_2_6)
        conn.execute(
            "INSERT INTO scheduled_messages (user_id, uuid, encrypted_payload, message_type, next_send_at, status,"
            " retry_count, created_at, updated_at) VALUES (%s, %s, %s, 'fixed', "
            "'2030-01-02 08:00:00.123456+08', 'pending', NULL, '2030-01-01T00:00:00Z', '2030-01-01T00:00:00Z')",
            (user, task_uuid, encrypt_for_storage(compact_json(payload), key)),
        )
        conn.execute("SELECT setval('scheduled_messages_id_seq', 40)")  # ids 2..40 were used and deleted
        if version == "2.6":
            conn.execute(
                "INSERT INTO push_subscriptions VALUES (%s, %s, %s)",
                (user, encrypt_for_storage(compact_json(sub), key), NOW - 5),
            )
            conn.execute(
                "INSERT INTO llm_credentials VALUES (%s, 'c1', %s, %s, %s)",
                (
                    user,
                    encrypt_for_storage('{"apiKey":"x"}', key),
                    "2030-01-01T00:00:00.000Z",
                    "2030-01-01T00:00:00.000Z",
                ),
            )

    source = PostgresSource.connect(pg_url)
    try:
        report = run_import(
            source,
            master_key=MASTER_KEY,
            table=DynamoTable(ddb_local_table, endpoint_url=ddb_local_endpoint, region="us-east-1"),
            now_ms=NOW,
        )
    finally:
        source.close()
    assert report.failed == 0, report.render()
    assert report.counters == {"tasks": 40}
    assert report.kinds["tasks"].written == 1

    ctx = ddb_context(ddb_local_endpoint, ddb_local_table)
    ctx.clock.current_ms = NOW
    runtime.use(ctx)
    try:
        api = WireClient(InProcessApi(), user_id=user)
        api.init()
        (task,) = api.list_messages().data["tasks"]
        assert (task["uuid"], task["id"], task["nextSendAt"], task["retryCount"]) == (
            task_uuid,
            1,
            "2030-01-02T00:00:00.123Z",
            0,
        )
        assert api.get_message(task_uuid).data["task"]["contactName"] == "Rei"
        if version == "2.6":
            assert api.get_subscription().data == {"exists": True, "updatedAt": NOW - 5, "endpoint": sub["endpoint"]}
            assert api.get_credentials().data["credentials"] == [
                {"credId": "c1", "updatedAt": "2030-01-01T00:00:00.000Z"}
            ]
    finally:
        runtime.use(None)
    assert json.loads(json.dumps(report.as_json()))["totals"]["failed"] == 0
