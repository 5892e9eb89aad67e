"""Reading reference databases: SQLite files, ``wrangler d1 export`` dumps, Postgres-typed values, and the
command line (dry run, a wrong key, nothing secret in the output). No DynamoDB needed."""

from __future__ import annotations

import re
import sqlite3
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from amsg_import.command import ImportStopped, run_import
from amsg_import.reader import ReferenceReader, TaskRecord
from amsg_import.sources import PostgresSource, SourceError, SqliteSource, open_source
from amsg_local.cli import main

from tests.support.reference_db import ReferenceDb

MASTER_KEY = "c" * 64
NOW = 1_893_456_000_000
USER = "0b8e1c52-6d7e-4c3a-9f0e-1d2c3b4a5f60"


def small_db(version: str = "cloud-data") -> ReferenceDb:
    db = ReferenceDb(version, MASTER_KEY)
    task = db.add_task(USER, next_send_ms=NOW + 60_000, message="hello")
    if "push_subscriptions" in db.tables():
        db.add_subscription(USER, {"endpoint": "https://push.example.test/1", "keys": {}}, NOW)
    if "client_state" in db.tables():
        db.add_state(USER, "ns", "k", {"v": 1}, NOW)
    if "message_outbox" in db.tables():
        db.add_outbox(USER, task, 0, 1, created_ms=NOW)
    if "llm_credentials" in db.tables():
        db.add_credential(USER, "cred/1", {"apiKey": "sk-very-secret"}, NOW)
    return db


def test_a_wrangler_dump_reads_like_the_database_file(tmp_path):
    db = small_db()
    db_file = tmp_path / "amsg.sqlite"
    db.save(str(db_file))
    # the shape of `wrangler d1 export`: a PRAGMA line, then CREATE TABLE / INSERT statements
    dump_file = tmp_path / "export.sql"
    dump_file.write_text("PRAGMA defer_foreign_keys=TRUE;\n" + db.dump(), encoding="utf-8")

    from_file = ReferenceReader(open_source(str(db_file)), MASTER_KEY)
    from_dump = ReferenceReader(open_source(str(dump_file)), MASTER_KEY)
    for kind in ("tasks", "state", "subscriptions", "credentials", "outbox"):
        assert list(from_file.read(kind)) == list(from_dump.read(kind)), kind
    assert from_dump.id_floor("outbox") == 1
    assert from_file.describe()["schema"] == from_dump.describe()["schema"]


def test_a_dump_in_the_shapes_d1_exports_take_still_loads(tmp_path):
    db = small_db()
    statements = [s for s in db.dump().split(";\n") if s.strip()]
    creates = [s for s in statements if s.lstrip().upper().startswith("CREATE TABLE")]
    rest = [s for s in statements if s not in creates and not s.lstrip().upper().startswith(("BEGIN", "COMMIT"))]
    # INSERTs before their tables, an explicit sqlite_sequence table, D1-internal tables, a transaction
    text = (
        ";\n".join(
            [
                "PRAGMA defer_foreign_keys=TRUE",
                "BEGIN TRANSACTION",
                "CREATE TABLE _cf_KV (key TEXT PRIMARY KEY, value BLOB)",
                "INSERT INTO \"_cf_KV\" VALUES('x', NULL)",
                "CREATE TABLE sqlite_sequence(name,seq)",
                *rest,
                *creates,
                "COMMIT",
            ]
        )
        + ";\n"
    )
    path = tmp_path / "export.sql"
    path.write_text(text, encoding="utf-8")
    reader = ReferenceReader(open_source(str(path)), MASTER_KEY)
    original = ReferenceReader(SqliteSource(db.conn, "x"), MASTER_KEY)
    for kind in ("tasks", "state", "subscriptions", "credentials", "outbox"):
        assert list(reader.read(kind)) == list(original.read(kind)), kind
    assert reader.id_floor("outbox") == original.id_floor("outbox") == 1


def test_not_a_reference_database_is_refused(tmp_path):
    other = tmp_path / "other.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    with pytest.raises(SourceError, match="not a reference amsg database"):
        ReferenceReader(open_source(str(other)), MASTER_KEY)
    garbage = tmp_path / "garbage.sql"
    garbage.write_text("this is not SQL", encoding="utf-8")
    with pytest.raises(SourceError, match="not a SQLite SQL dump"):
        open_source(str(garbage))


def test_every_schema_version_is_recognised():
    labels = {
        version: ReferenceReader(SqliteSource(small_db(version).conn, "x"), MASTER_KEY).schema_label()
        for version in ("tasks-only", "client-state", "leases", "outbox", "tenant-tasks", "cloud-data")
    }
    assert len(set(labels.values())) == 6, labels
    assert "with outbox" in labels["outbox"] and "no outbox table" in labels["tenant-tasks"]


# ---- Postgres: the reference's pg/neon schema, with the driver's value types -------------------------------


class FakePgCursor:
    """Answers the statements PostgresSource sends, from in-memory tables (like psycopg's cursor)."""

    def __init__(self, tables: dict[str, list[dict[str, Any]]]) -> None:
        self.tables = tables
        self.description: list[tuple[str]] = []
        self._rows: list[tuple[Any, ...]] = []

    def execute(self, sql: str, params: list[Any]) -> None:
        if "information_schema.tables" in sql:
            self._rows = [(name,) for name in self.tables]
        elif "information_schema.columns" in sql:
            rows = self.tables[params[0]]
            self._rows = [(c,) for c in rows[0]] if rows else []
        elif "MAX(id)" in sql:
            table = re.search(r'FROM "(\w+)"', sql).group(1)
            self._rows = [(max(int(r["id"]) for r in self.tables[table]),)]
        elif "_id_seq" in sql:
            table = re.search(r'"(\w+)_id_seq"', sql).group(1)
            self._rows = [(str(max(int(r["id"]) for r in self.tables[table]) + 5),)]
        else:
            assert "%s" in sql or "WHERE" not in sql, "Postgres placeholders"
            table = re.search(r'FROM "(\w+)"', sql).group(1)
            rows = self.tables[table]
            self.description = [(c,) for c in rows[0]]
            self._rows = [tuple(r.values()) for r in rows]

    def fetchone(self) -> tuple[Any, ...] | None:
        return self._rows[0] if self._rows else None

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self._rows

    def fetchmany(self, n: int) -> list[tuple[Any, ...]]:
        batch, self._rows = self._rows[:n], self._rows[n:]
        return batch

    def close(self) -> None:
        pass


class FakePg:
    def __init__(self, tables: dict[str, list[dict[str, Any]]]) -> None:
        self.tables = tables

    def cursor(self, name: str | None = None) -> FakePgCursor:
        return FakePgCursor(self.tables)

    def close(self) -> None:
        pass


def test_postgres_values_are_normalised_to_our_encodings():
    cst = timezone(timedelta(hours=8))
    ciphertext = small_db().tasks[0]["encrypted_payload"]
    tables = {
        "scheduled_messages": [
            {
                "id": 7,
                "user_id": USER,
                "uuid": "5b0c7a0e-1a52-4d7b-8d1f-9a3c0e2b4d6f",
                "encrypted_payload": ciphertext,
                "message_type": "fixed",
                "next_send_at": datetime(2030, 1, 2, 8, 0, 0, 123456, tzinfo=cst),  # timestamptz, µs
                "status": "pending",
                "retry_count": None,  # nullable in the pg schema
                "created_at": datetime(2030, 1, 1, tzinfo=UTC),
                "updated_at": datetime(2030, 1, 1, tzinfo=UTC),
                "lease_until": None,
                "retry_after": datetime(2030, 1, 2, 0, 5, tzinfo=UTC),
                "serialize_group": None,
                "last_error": None,
            }
        ],
        "push_subscriptions": [{"user_id": USER, "subscription": ciphertext, "updated_at": "1893456000000"}],
    }
    source = PostgresSource.connect("postgres://user:pw@db.invalid/amsg", connect=lambda url: FakePg(tables))
    reader = ReferenceReader(source, MASTER_KEY)
    (task,) = list(reader.read("tasks"))
    assert isinstance(task, TaskRecord)
    assert task.next_send_at == "2030-01-02T00:00:00.123Z"
    assert task.retry_after == "2030-01-02T00:05:00.000Z"
    assert task.retry_count == 0 and task.created_at == "2030-01-01T00:00:00.000Z"
    (sub,) = list(reader.read("subscriptions"))
    assert sub.updated_at == 1_893_456_000_000  # BIGINT handed over as a string
    assert reader.id_floor("tasks") == 12  # the SERIAL sequence is above the highest id still present
    assert not reader.has("state") and list(reader.read("state")) == []


def test_postgres_connection_errors_never_echo_the_url():
    def refuse(url: str) -> Any:
        raise OSError(f"could not connect to {url}")

    with pytest.raises(SourceError) as raised:
        PostgresSource.connect("postgres://user:hunter2@db.invalid/amsg", connect=refuse)
    assert "hunter2" not in str(raised.value)


# ---- the command line ---------------------------------------------------------------------------------------


def test_cli_dry_run_reports_without_secrets(tmp_path, capsys, monkeypatch):
    db = small_db()
    path = tmp_path / "amsg.sqlite"
    db.save(str(path))
    monkeypatch.setenv("AMSG_MASTER_KEY", MASTER_KEY)
    monkeypatch.delenv("AMSG_VAPID_PUBLIC_KEY", raising=False)
    assert main(["import", str(path), "--dry-run", "--env-file", str(tmp_path / "none.env")]) == 0
    out = capsys.readouterr()
    text = out.out + out.err
    assert "would write" in text and "dry run: nothing was written." in text
    assert re.search(r"tasks\s+1\s+1\s+0\s+0", out.out)
    assert MASTER_KEY not in text and "sk-very-secret" not in text
    assert db.tasks[0]["encrypted_payload"][:40] not in text
    # the single line's import says it too: the subscriptions need the reference's VAPID pair
    assert "WARNING  the push subscriptions imported (2 subscription and task rows read)" in out.out


def test_cli_wrong_key_and_missing_table_stop_with_a_clear_message(tmp_path, capsys, monkeypatch):
    db = small_db()
    path = tmp_path / "amsg.sqlite"
    db.save(str(path))
    env_file = tmp_path / "none.env"
    monkeypatch.setenv("AMSG_MASTER_KEY", "d" * 64)
    assert main(["import", str(path), "--dry-run", "--env-file", str(env_file)]) == 2
    err = capsys.readouterr().err
    assert "master key does not decrypt" in err and "d" * 64 not in err

    monkeypatch.setenv("AMSG_MASTER_KEY", MASTER_KEY)
    monkeypatch.delenv("AMSG_TABLE_NAME", raising=False)
    assert main(["import", str(path), "--env-file", str(env_file)]) == 2
    assert "no target table" in capsys.readouterr().err


def test_run_import_without_a_table_refuses_to_write():
    with pytest.raises(ImportStopped):
        run_import(SqliteSource(small_db().conn, "x"), master_key=MASTER_KEY, table=None, now_ms=NOW)


def test_owned_rows_carry_the_owner_reference_our_own_owned_writes_store():
    """A task whose payload records its owner guard, and a sidecar, are read with ``owner_ref``/``owner_gen``
    (as an owned schedule-message or state write stores them), so guards and cleanups see them as owned."""
    from amsg.crypto import compact_json
    from amsg.domain.ownership import owner_ref

    db = small_db()
    guarded = db.add_task(USER, next_send_ms=NOW + 60_000, message="owned")
    guard = {"owner": {"type": "character", "id": "char:a"}, "generation": 2}
    db.conn.execute(
        "UPDATE scheduled_messages SET encrypted_payload = ? WHERE uuid = ?",
        (db.enc(USER, {**guarded["payload"], "__cloudOwnerGuard": guard}), guarded["uuid"]),
    )
    db.conn.execute(
        "INSERT INTO cloud_resource_metadata VALUES (?, ?, ?)",
        (USER, compact_json(["state", "ns", "k"]), db.enc(USER, {"owner": guard["owner"], "generation": 2})),
    )
    db.conn.execute(
        "INSERT INTO cloud_resource_metadata VALUES (?, ?, ?)",
        (USER, compact_json(["credential", "cred/1"]), db.enc(USER, {"owner": None, "kind": "chat"})),
    )
    reader = ReferenceReader(SqliteSource(db.conn, "x"), MASTER_KEY)
    tasks = {t.uuid: t for t in reader.read("tasks") if isinstance(t, TaskRecord)}
    ref = owner_ref("character", "char:a")
    assert (tasks[guarded["uuid"]].owner_ref, tasks[guarded["uuid"]].owner_gen) == (ref, 2)
    assert [t.owner_ref for u, t in tasks.items() if u != guarded["uuid"]] == [None]
    sidecars = {s.resource_key: (s.owner_ref, s.owner_gen) for s in reader.read("sidecars")}
    assert sidecars == {compact_json(["state", "ns", "k"]): (ref, 2), compact_json(["credential", "cred/1"]): (None, 0)}
