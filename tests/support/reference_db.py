"""Reference (``@rei-standard/amsg-server``) databases of several schema versions, for the import tests.

The DDL follows the reference's SQLite schema as it evolved: tasks only → client state → task leases →
user-level push subscriptions, back-off and serialize groups → outbox and ``last_error`` → LLM credentials and
the cloud-data tables (with chunked client-state values). Rows are encrypted in the reference's storage format
(AES-256-GCM ``iv:tag:ct`` hex under ``sha256(master key + user id)``) with our crypto module.
"""

from __future__ import annotations

import sqlite3
import uuid
from dataclasses import dataclass, field
from typing import Any

from amsg.crypto import compact_json, derive_user_key, encrypt_for_storage
from amsg.timeutil import iso_from_ms

SEP = "\x1f"

TASKS_V1 = """
CREATE TABLE scheduled_messages (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  user_id TEXT NOT NULL,
  uuid TEXT,
  encrypted_payload TEXT NOT NULL,
  message_type TEXT NOT NULL CHECK (message_type IN ('fixed', 'prompted', 'auto', 'instant')),
  next_send_at TEXT NOT NULL,
  status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'failed')),
  retry_count INTEGER NOT NULL DEFAULT 0,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL
);
CREATE UNIQUE INDEX uidx_uuid ON scheduled_messages (uuid) WHERE uuid IS NOT NULL;
"""
CLIENT_STATE = """
CREATE TABLE client_state (
  user_id TEXT NOT NULL, namespace TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
  updated_at INTEGER NOT NULL, PRIMARY KEY (user_id, namespace, key)
);
"""
PUSH_SUBSCRIPTIONS = """
CREATE TABLE push_subscriptions (user_id TEXT PRIMARY KEY, subscription TEXT NOT NULL, updated_at INTEGER NOT NULL);
"""
OUTBOX = """
CREATE TABLE message_outbox (
  id INTEGER PRIMARY KEY AUTOINCREMENT, user_id TEXT NOT NULL, message_id TEXT NOT NULL, task_uuid TEXT,
  session_id TEXT, message_index INTEGER, total_messages INTEGER, payload TEXT NOT NULL,
  created_at INTEGER NOT NULL, delivered_at INTEGER, acked_at INTEGER, UNIQUE (user_id, message_id)
);
CREATE INDEX idx_outbox_unacked ON message_outbox (user_id, id) WHERE acked_at IS NULL;
"""
CREDENTIALS = """
CREATE TABLE llm_credentials (
  user_id TEXT NOT NULL, cred_id TEXT NOT NULL, encrypted_value TEXT NOT NULL, created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL, PRIMARY KEY (user_id, cred_id)
);
"""
CLOUD = """
CREATE TABLE cloud_data_records (
  user_id TEXT NOT NULL, kind TEXT NOT NULL, id TEXT NOT NULL, data TEXT NOT NULL, idempotency_key TEXT,
  updated_at INTEGER NOT NULL, write_token TEXT, lease_until INTEGER, lease_token TEXT,
  PRIMARY KEY (user_id, kind, id), UNIQUE (user_id, kind, idempotency_key)
);
CREATE TABLE cloud_data_record_chunks (
  user_id TEXT NOT NULL, kind TEXT NOT NULL, id TEXT NOT NULL, chunk_index INTEGER NOT NULL, value TEXT NOT NULL,
  write_token TEXT NOT NULL, PRIMARY KEY (user_id, kind, id, chunk_index)
);
CREATE TABLE cloud_data_owners (
  user_id TEXT NOT NULL, owner_type TEXT NOT NULL, owner_id TEXT NOT NULL, active INTEGER NOT NULL,
  generation INTEGER NOT NULL, updated_at INTEGER NOT NULL, PRIMARY KEY (user_id, owner_type, owner_id)
);
CREATE TABLE cloud_resource_metadata (
  user_id TEXT NOT NULL, resource_key TEXT NOT NULL, encrypted_value TEXT NOT NULL, PRIMARY KEY (user_id, resource_key)
);
CREATE TABLE cloud_guard_assertions (
  allowed INTEGER NOT NULL DEFAULT 1 CONSTRAINT cloud_owner_guard CHECK (allowed = 1)
);
"""


def _add(column: str) -> str:
    return f"ALTER TABLE scheduled_messages ADD COLUMN {column} TEXT;"


# version name -> DDL, applied the way the reference migrated an existing database (ALTER TABLE ADD COLUMN)
VERSIONS: dict[str, str] = {
    "tasks-only": TASKS_V1,
    "client-state": TASKS_V1 + CLIENT_STATE,
    "leases": TASKS_V1 + CLIENT_STATE + _add("lease_until"),
    "outbox": TASKS_V1
    + CLIENT_STATE
    + PUSH_SUBSCRIPTIONS
    + OUTBOX
    + "".join(_add(c) for c in ("lease_until", "retry_after", "serialize_group", "last_error")),
    # a tenant database of the multi-tenant line: 2.6.0's task columns, no outbox table
    "tenant-tasks": TASKS_V1
    + "".join(_add(c) for c in ("lease_until", "retry_after", "serialize_group", "last_error")),
    "cloud-data": TASKS_V1
    + CLIENT_STATE
    + PUSH_SUBSCRIPTIONS
    + OUTBOX
    + CREDENTIALS
    + CLOUD
    + "".join(_add(c) for c in ("lease_until", "retry_after", "serialize_group", "last_error")),
}


def task_payload(message: str, *, subscription: dict[str, Any] | None = None) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "contactName": "Rei",
        "messageType": "fixed",
        "userMessage": message,
        "recurrenceType": "none",
        "metadata": {"source": "reference"},
    }
    if subscription is not None:
        payload["pushSubscription"] = subscription  # before user-level subscriptions, every task carried one
    return payload


@dataclass
class ReferenceDb:
    """A reference database under construction; remembers what it holds for the read-back assertions."""

    version: str
    master_key: str
    conn: sqlite3.Connection = field(init=False)
    tasks: list[dict[str, Any]] = field(default_factory=list)
    states: list[dict[str, Any]] = field(default_factory=list)
    subscriptions: dict[str, dict[str, Any]] = field(default_factory=dict)
    outbox: list[dict[str, Any]] = field(default_factory=list)
    credentials: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.conn = sqlite3.connect(":memory:")
        self.conn.executescript(VERSIONS[self.version])

    def tables(self) -> set[str]:
        return {r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}

    def columns(self, table: str) -> set[str]:
        return {r[1] for r in self.conn.execute(f"PRAGMA table_info({table})")}

    def key(self, user_id: str) -> str:
        return derive_user_key(self.master_key, user_id)

    def enc(self, user_id: str, value: Any) -> str:
        return encrypt_for_storage(value if isinstance(value, str) else compact_json(value), self.key(user_id))

    def add_task(
        self,
        user_id: str,
        *,
        next_send_ms: int,
        message: str,
        status: str = "pending",
        retry_count: int = 0,
        task_uuid: str | None = "auto",
        lease_until_ms: int | None = None,
        retry_after_ms: int | None = None,
        last_error: str | None = None,
        subscription: dict[str, Any] | None = None,
        created_ms: int | None = None,
    ) -> dict[str, Any]:
        if task_uuid == "auto":
            task_uuid = str(uuid.uuid4())
        created = iso_from_ms(created_ms if created_ms is not None else next_send_ms - 3_600_000)
        payload = task_payload(message, subscription=subscription)
        row: dict[str, Any] = {
            "user_id": user_id,
            "uuid": task_uuid,
            "encrypted_payload": self.enc(user_id, payload),
            "message_type": "fixed",
            "next_send_at": iso_from_ms(next_send_ms),
            "status": status,
            "retry_count": retry_count,
            "created_at": created,
            "updated_at": created,
        }
        columns = self.columns("scheduled_messages")
        optional = {
            "lease_until": iso_from_ms(lease_until_ms) if lease_until_ms else None,
            "retry_after": iso_from_ms(retry_after_ms) if retry_after_ms else None,
            "last_error": last_error,
        }
        row.update({k: v for k, v in optional.items() if k in columns})
        cursor = self.conn.execute(
            f"INSERT INTO scheduled_messages ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})",
            list(row.values()),
        )
        record = {**row, "id": cursor.lastrowid, "payload": payload}
        self.tasks.append(record)
        return record

    def add_subscription(self, user_id: str, subscription: dict[str, Any], updated_ms: int) -> None:
        self.conn.execute(
            "INSERT INTO push_subscriptions VALUES (?, ?, ?)", (user_id, self.enc(user_id, subscription), updated_ms)
        )
        self.subscriptions[user_id] = {"subscription": subscription, "updated_at": updated_ms}

    def add_state(self, user_id: str, namespace: str, key: str, value: Any, updated_ms: int) -> None:
        """One row, or (values over 200 KiB, as the cloud-data-era reference does) a marker + slice rows."""
        text = compact_json(value)
        raw = text.encode("utf-8")
        slice_bytes = 200 * 1024
        if len(raw) <= slice_bytes:
            self.conn.execute(
                "INSERT INTO client_state VALUES (?, ?, ?, ?, ?)",
                (user_id, namespace, key, self.enc(user_id, text), updated_ms),
            )
        else:
            slices: list[str] = []
            start = 0
            while start < len(raw):  # cut by bytes, never inside a code point (as the reference does)
                end = min(len(raw), start + slice_bytes)
                while end < len(raw) and (raw[end] & 0xC0) == 0x80:
                    end -= 1
                slices.append(raw[start:end].decode("utf-8"))
                start = end
            marker = f"{SEP}amsg-chunked{SEP}v1{SEP}{len(slices)}"
            self.conn.execute(
                "INSERT INTO client_state VALUES (?, ?, ?, ?, ?)", (user_id, namespace, key, marker, updated_ms)
            )
            for index, part in enumerate(slices):
                self.conn.execute(
                    "INSERT INTO client_state VALUES (?, ?, ?, ?, ?)",
                    (
                        user_id,
                        f"{SEP}amsg-chunks{SEP}{namespace}",
                        f"{key}{SEP}{index}",
                        self.enc(user_id, part),
                        updated_ms,
                    ),
                )
        self.states.append(
            {"user_id": user_id, "namespace": namespace, "key": key, "value": value, "updated_at": updated_ms}
        )

    def add_outbox(
        self,
        user_id: str,
        task: dict[str, Any],
        index: int,
        total: int,
        *,
        created_ms: int,
        delivered_ms: int | None = None,
        acked_ms: int | None = None,
    ) -> dict[str, Any]:
        occurrence = task["next_send_at"]
        message_id = f"msg_task_{task['id']}@{occurrence}_{index}"
        push = {
            "title": "Rei",
            "message": f"part {index}",
            "messageId": message_id,
            "taskUuid": task["uuid"],
            "messageIndex": index + 1,
            "totalMessages": total,
        }
        cursor = self.conn.execute(
            "INSERT INTO message_outbox (user_id, message_id, task_uuid, session_id, message_index, total_messages,"
            " payload, created_at, delivered_at, acked_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                user_id,
                message_id,
                task["uuid"],
                f"session-{task['id']}",
                index + 1,
                total,
                self.enc(user_id, push),
                created_ms,
                delivered_ms,
                acked_ms,
            ),
        )
        row = {
            "id": cursor.lastrowid,
            "user_id": user_id,
            "message_id": message_id,
            "push": push,
            "acked_at": acked_ms,
            "delivered_at": delivered_ms,
            "created_at": created_ms,
        }
        self.outbox.append(row)
        return row

    def add_credential(self, user_id: str, cred_id: str, value: Any, updated_ms: int) -> None:
        iso = iso_from_ms(updated_ms)
        self.conn.execute(
            "INSERT INTO llm_credentials VALUES (?, ?, ?, ?, ?)", (user_id, cred_id, self.enc(user_id, value), iso, iso)
        )
        self.credentials.append({"user_id": user_id, "cred_id": cred_id, "value": value, "updated_at": iso})

    def add_cloud(self, user_id: str, task_uuid: str, now_ms: int) -> None:
        """An owner fence, a sidecar on a task, a small and a chunked management record."""
        self.conn.execute("INSERT INTO cloud_data_owners VALUES (?, 'character', 'char:a', 1, 3, ?)", (user_id, now_ms))
        self.conn.execute(
            "INSERT INTO cloud_resource_metadata VALUES (?, ?, ?)",
            (
                user_id,
                compact_json(["task", task_uuid]),
                self.enc(user_id, {"owner": {"type": "character", "id": "char:a"}, "kind": "task", "generation": 3}),
            ),
        )
        self.conn.execute(
            "INSERT INTO cloud_data_records (user_id, kind, id, data, idempotency_key, updated_at, write_token)"
            " VALUES (?, 'plan', 'p1', ?, NULL, ?, 'w1')",
            (user_id, self.enc(user_id, {"plan": 1}), now_ms),
        )
        big = self.enc(user_id, {"snapshot": "x" * 300_000})
        parts = [big[i : i + 204_800] for i in range(0, len(big), 204_800)]
        self.conn.execute(
            "INSERT INTO cloud_data_records (user_id, kind, id, data, idempotency_key, updated_at, write_token)"
            " VALUES (?, 'operation', 'o1', ?, 'idem-1', ?, 'w2')",
            (user_id, f"{SEP}amsg-record{SEP}{len(parts)}", now_ms),
        )
        for index, part in enumerate(parts):
            self.conn.execute(
                "INSERT INTO cloud_data_record_chunks VALUES (?, 'operation', 'o1', ?, ?, 'w2')", (user_id, index, part)
            )

    def save(self, path: str) -> None:
        self.conn.commit()
        target = sqlite3.connect(path)
        self.conn.backup(target)
        target.close()

    def dump(self) -> str:
        self.conn.commit()
        return "\n".join(self.conn.iterdump())
