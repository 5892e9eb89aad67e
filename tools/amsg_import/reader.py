"""Reference rows → plain records, for every schema version of the reference.

Which tables and columns exist decides what is read: the oldest databases have only ``scheduled_messages``
without the lease/back-off/last-error columns; later ones add ``client_state``, ``push_subscriptions``,
``message_outbox``, ``llm_credentials`` and the cloud-data tables. Times are normalised to our encodings (ISO
``toISOString`` strings for task and credential times, epoch ms elsewhere), whatever the driver returns (SQLite
text, Postgres ``timestamptz`` / ``BIGINT``-as-string).
"""

from __future__ import annotations

import json
import uuid as uuid_lib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, TypeGuard

from amsg import jsonio
from amsg.crypto import DecryptError, decrypt_from_storage, derive_user_key, encrypt_for_storage
from amsg.domain.ownership import GUARD_FIELD, owner_ref
from amsg.timeutil import iso_from_ms, ms_from_datetime, normalize_iso

from amsg_import.sources import Source, SourceError

SEP = "\x1f"
STATE_CHUNK_NS_PREFIX = f"{SEP}amsg-chunks{SEP}"
STATE_CHUNK_MARKER = f"{SEP}amsg-chunked{SEP}v1{SEP}"
RECORD_CHUNK_MARKER = f"{SEP}amsg-record{SEP}"

# The order matters: resources before the ownership metadata that points at them.
KINDS = ("owners", "subscriptions", "credentials", "state", "tasks", "outbox", "records", "sidecars")
TABLES = {
    "tasks": "scheduled_messages",
    "state": "client_state",
    "subscriptions": "push_subscriptions",
    "credentials": "llm_credentials",
    "outbox": "message_outbox",
    "owners": "cloud_data_owners",
    "sidecars": "cloud_resource_metadata",
    "records": "cloud_data_records",
}


@dataclass
class TaskRecord:
    user_id: str
    id: int
    uuid: str
    uuid_derived: bool
    encrypted_payload: str
    message_type: str
    next_send_at: str
    status: str
    retry_count: int
    last_error: str | None
    created_at: str
    updated_at: str
    lease_until: str | None
    retry_after: str | None
    owner_ref: str | None = None  # the owner guard the payload records (as our own owned writes store it)
    owner_gen: int = 0

    @property
    def ref(self) -> str:
        return f"task {self.uuid}"


@dataclass
class StateRecord:
    user_id: str
    namespace: str
    key: str
    value: str
    updated_at: int
    plain_bytes: int
    chunked: bool

    @property
    def ref(self) -> str:
        return f"state {self.namespace!r}/{self.key!r}"


@dataclass
class SubscriptionRecord:
    user_id: str
    subscription: str
    updated_at: int

    @property
    def ref(self) -> str:
        return f"subscription of {self.user_id}"


@dataclass
class CredentialRecord:
    user_id: str
    cred_id: str
    encrypted_value: str
    created_at: str
    updated_at: str

    @property
    def ref(self) -> str:
        return f"credential {self.cred_id!r}"


@dataclass
class OutboxRecord:
    user_id: str
    id: int
    message_id: str
    task_uuid: str | None
    session_id: str | None
    message_index: int | None
    total_messages: int | None
    payload: str
    created_at: int
    delivered_at: int | None
    acked_at: int | None

    @property
    def ref(self) -> str:
        return f"outbox {self.message_id!r}"


@dataclass
class OwnerRecord:
    user_id: str
    owner_type: str
    owner_id: str
    active: bool
    generation: int
    updated_at: int

    @property
    def ref(self) -> str:
        return f"owner {self.owner_type}/{self.owner_id}"


@dataclass
class SidecarRecord:
    user_id: str
    resource_key: str
    encrypted_value: str
    owner_ref: str | None = None  # from the decrypted {owner, kind, generation}: what owned writes store
    owner_gen: int = 0

    @property
    def ref(self) -> str:
        return f"metadata {self.resource_key}"


@dataclass
class CloudRecord:
    user_id: str
    kind: str
    id: str
    data: str
    idempotency_key: str | None
    updated_at: int
    lease_until: int | None
    lease_token: str | None

    @property
    def ref(self) -> str:
        return f"record {self.kind}/{self.id}"


@dataclass
class Problem:
    """A source row that cannot be imported as it is (reported as failed, with the reason)."""

    kind: str
    user_id: str
    ref: str
    reason: str


Record = (
    TaskRecord
    | StateRecord
    | SubscriptionRecord
    | CredentialRecord
    | OutboxRecord
    | OwnerRecord
    | SidecarRecord
    | CloudRecord
)


# ---- value normalisation ------------------------------------------------------------------------------------


def to_ms(value: Any) -> int | None:
    """Epoch ms from an INTEGER/BIGINT column (Postgres drivers may hand BIGINT over as a string)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError("boolean where epoch ms expected")
    if isinstance(value, int | Decimal):
        return int(value)
    if isinstance(value, float):
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    if isinstance(value, datetime):
        return ms_from_datetime(value if value.tzinfo else value.replace(tzinfo=UTC))
    raise ValueError("not an epoch-ms value")


def to_iso(value: Any) -> str | None:
    """``toISOString`` form from ISO text (SQLite) or a ``datetime`` (Postgres ``timestamptz``)."""
    if value is None:
        return None
    if isinstance(value, datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=UTC)
        return iso_from_ms(ms_from_datetime(aware))
    iso = normalize_iso(value)
    if iso is None:
        raise ValueError("not an ISO timestamp")
    return iso


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def derived_task_uuid(user_id: str, task_id: int) -> str:
    """A stable uuid for a legacy task row that has none (our tasks are addressed by uuid)."""
    return str(uuid_lib.uuid5(uuid_lib.NAMESPACE_URL, f"amsg-import:{user_id}:{task_id}"))


def looks_like_ciphertext(value: Any) -> TypeGuard[str]:
    if not isinstance(value, str):
        return False
    parts = value.split(":")
    return len(parts) == 3 and all(parts) and all(c in "0123456789abcdefABCDEF" for c in "".join(parts))


def ciphertext_plain_bytes(value: str) -> int:
    """UTF-8 bytes of the plaintext of a storage ciphertext, from its length (GCM adds no padding)."""
    return len(value.split(":")[2]) // 2


# ---- the reader ---------------------------------------------------------------------------------------------


class ReferenceReader:
    def __init__(self, source: Source, master_key: str) -> None:
        self.source = source
        self.master_key = master_key
        self._tables = source.tables()
        if "scheduled_messages" not in self._tables:
            raise SourceError(f"{source.label}: no scheduled_messages table — not a reference amsg database")
        self._keys: dict[str, str] = {}

    def user_key(self, user_id: str) -> str:
        key = self._keys.get(user_id)
        if key is None:
            key = self._keys[user_id] = derive_user_key(self.master_key, user_id)
        return key

    def has(self, kind: str) -> bool:
        return TABLES[kind] in self._tables

    def describe(self) -> dict[str, Any]:
        """What this database holds: the tables we read and the optional task columns found."""
        task_columns = self.source.columns("scheduled_messages")
        optional = [c for c in ("lease_until", "retry_after", "serialize_group", "last_error") if c in task_columns]
        return {
            "source": self.source.label,
            "tables": [TABLES[k] for k in KINDS if self.has(k)],
            "taskColumns": optional,
            "schema": self.schema_label(),
        }

    def schema_label(self) -> str:
        columns = self.source.columns("scheduled_messages")
        if "cloud_data_records" in self._tables:
            return "2.6.0-cloud-data (cloud-data tables)"
        if "llm_credentials" in self._tables and "message_outbox" in self._tables:
            return "2.6.0 with outbox and LLM credentials"
        if "message_outbox" in self._tables:
            return "2.6.0 with outbox"
        if "last_error" in columns:  # a multi-tenant line's tenant database: 2.6.0 task columns, no outbox table
            return "2.6.0 tasks with delivery errors (no outbox table)"
        if "push_subscriptions" in self._tables:
            return "2.6.0 with user-level push subscriptions"
        if "lease_until" in columns:
            return "2.6.0 with task leases"
        if "client_state" in self._tables:
            return "2.5 with client state"
        return "2.x tasks only (subscriptions inside task payloads)"

    def id_floor(self, kind: str) -> int:
        """The highest id the reference ever handed out for ``tasks``/``outbox`` (deleted rows included, so
        counters continuing above it never reuse an id a client has seen)."""
        table = TABLES[kind]
        if table not in self._tables:
            return 0
        return max(self.source.max_id(table), self.source.sequence(table) or 0)

    def read(self, kind: str) -> Iterator[Record | Problem]:
        if not self.has(kind):
            return iter(())
        records: Iterator[Record | Problem] = getattr(self, f"_read_{kind}")()
        return records

    def ciphertexts(self, kind: str) -> Iterator[tuple[str, str]]:
        """``(user_id, ciphertext)`` of a kind's encrypted column, for the master-key check."""
        column = {
            "tasks": "encrypted_payload",
            "state": "value",
            "subscriptions": "subscription",
            "credentials": "encrypted_value",
            "outbox": "payload",
            "sidecars": "encrypted_value",
            "records": "data",
        }.get(kind)
        if column is None or not self.has(kind):
            return
        for row in self.source.rows(TABLES[kind]):
            value = row.get(column)
            if looks_like_ciphertext(value):
                yield str(row["user_id"]), value

    def decrypts(self, user_id: str, ciphertext: str) -> bool:
        try:
            decrypt_from_storage(ciphertext, self.user_key(user_id))
        except DecryptError:
            return False
        return True

    # ---- per kind ---------------------------------------------------------------------------------------

    def _read_tasks(self) -> Iterator[TaskRecord | Problem]:
        for row in self.source.rows("scheduled_messages", order_by=("id",)):
            user_id = str(row["user_id"])
            task_id = int(row["id"])
            raw_uuid = row.get("uuid")
            ref = f"task {raw_uuid or f'#{task_id}'}"
            try:
                next_send_at = to_iso(row["next_send_at"])
                created_at = to_iso(row.get("created_at")) or next_send_at
                updated_at = to_iso(row.get("updated_at")) or created_at
                lease_until = to_iso(row.get("lease_until"))
                retry_after = to_iso(row.get("retry_after"))
            except ValueError as exc:
                yield Problem("tasks", user_id, ref, f"unreadable time ({exc})")
                continue
            status = str(row.get("status") or "pending")
            if status not in ("pending", "sent", "failed"):
                yield Problem("tasks", user_id, ref, f"unknown status {status!r}")
                continue
            if not isinstance(row.get("encrypted_payload"), str):
                yield Problem("tasks", user_id, ref, "no payload")
                continue
            assert next_send_at is not None and created_at is not None and updated_at is not None
            ref_gen = self._task_owner(user_id, row["encrypted_payload"])
            yield TaskRecord(
                user_id=user_id,
                id=task_id,
                uuid=str(raw_uuid) if raw_uuid else derived_task_uuid(user_id, task_id),
                uuid_derived=not raw_uuid,
                encrypted_payload=row["encrypted_payload"],
                message_type=str(row["message_type"]),
                next_send_at=next_send_at,
                status=status,
                retry_count=int(row.get("retry_count") or 0),
                last_error=row.get("last_error") if isinstance(row.get("last_error"), str) else None,
                created_at=created_at,
                updated_at=updated_at,
                lease_until=lease_until,
                retry_after=retry_after,
                owner_ref=ref_gen[0] if ref_gen else None,
                owner_gen=ref_gen[1] if ref_gen else 0,
            )

    def _owner_of(self, user_id: str, ciphertext: str, field: str) -> tuple[str, int] | None:
        """(owner reference, generation) of a stored ``{owner, generation}`` (a task's guard or a sidecar),
        or None when there is none or it cannot be read (the row is still imported, unowned)."""
        try:
            value = jsonio.loads(decrypt_from_storage(ciphertext, self.user_key(user_id)))
        except (DecryptError, ValueError, jsonio.JsonError):
            return None
        record = value.get(field) if field and isinstance(value, dict) else value
        if not isinstance(record, dict) or not isinstance(record.get("owner"), dict):
            return None
        owner, generation = record["owner"], record.get("generation", 0)
        if not (isinstance(owner.get("type"), str) and isinstance(owner.get("id"), str)):
            return None
        if not isinstance(generation, int) or isinstance(generation, bool) or generation < 0:
            return None
        return owner_ref(owner["type"], owner["id"]), generation

    def _task_owner(self, user_id: str, ciphertext: str) -> tuple[str, int] | None:
        return self._owner_of(user_id, ciphertext, GUARD_FIELD)

    def _read_state(self) -> Iterator[StateRecord | Problem]:
        for row in self.source.rows("client_state", order_by=("user_id", "namespace", "key")):
            namespace = str(row["namespace"])
            if namespace.startswith(STATE_CHUNK_NS_PREFIX):
                continue  # slices of a chunked value: read with their root
            user_id, key, value = str(row["user_id"]), str(row["key"]), row["value"]
            ref = f"state {namespace!r}/{key!r}"
            try:
                updated_at = to_ms(row["updated_at"])
            except ValueError:
                yield Problem("state", user_id, ref, "unreadable updated_at")
                continue
            assert updated_at is not None
            if isinstance(value, str) and value.startswith(STATE_CHUNK_MARKER):
                assembled = self._assemble_state(user_id, namespace, key, value, updated_at)
                if isinstance(assembled, str):
                    yield Problem("state", user_id, ref, assembled)
                    continue
                text, plain_bytes = assembled
                yield StateRecord(user_id, namespace, key, text, updated_at, plain_bytes, chunked=True)
                continue
            if not looks_like_ciphertext(value):
                yield Problem("state", user_id, ref, "value is not a storage ciphertext")
                continue
            yield StateRecord(user_id, namespace, key, value, updated_at, ciphertext_plain_bytes(value), chunked=False)

    def _assemble_state(
        self, user_id: str, namespace: str, key: str, marker: str, updated_at: int
    ) -> tuple[str, int] | str:
        """One ciphertext of the whole value from the reference's per-slice ciphertexts, or the reason it is
        unreadable (the reference itself reads such a key as absent)."""
        count_text = marker[len(STATE_CHUNK_MARKER) :]
        if not count_text.isdigit() or int(count_text) < 1:
            return "malformed chunk marker"
        count = int(count_text)
        prefix = key + SEP
        slices: dict[int, Any] = {}
        for chunk in self.source.rows(
            "client_state", where={"user_id": user_id, "namespace": STATE_CHUNK_NS_PREFIX + namespace}
        ):
            chunk_key = str(chunk["key"])
            if not chunk_key.startswith(prefix) or not chunk_key[len(prefix) :].isdigit():
                continue
            if to_ms(chunk["updated_at"]) != updated_at:
                continue  # a slice of another write: does not belong to this value
            slices[int(chunk_key[len(prefix) :])] = chunk["value"]
        if any(i not in slices for i in range(count)):
            return "incomplete chunked value (a slice is missing; the reference reads it as absent)"
        user_key = self.user_key(user_id)
        try:
            plain = "".join(decrypt_from_storage(str(slices[i]), user_key) for i in range(count))
        except DecryptError:
            return "a slice of the chunked value does not decrypt"
        return encrypt_for_storage(plain, user_key), len(plain.encode("utf-8", errors="surrogatepass"))

    def _read_subscriptions(self) -> Iterator[SubscriptionRecord | Problem]:
        for row in self.source.rows("push_subscriptions", order_by=("user_id",)):
            user_id = str(row["user_id"])
            try:
                updated_at = to_ms(row.get("updated_at")) or 0
            except ValueError:
                yield Problem("subscriptions", user_id, f"subscription of {user_id}", "unreadable updated_at")
                continue
            yield SubscriptionRecord(user_id, str(row["subscription"]), updated_at)

    def _read_credentials(self) -> Iterator[CredentialRecord | Problem]:
        for row in self.source.rows("llm_credentials", order_by=("user_id", "cred_id")):
            user_id, cred_id = str(row["user_id"]), str(row["cred_id"])
            try:
                updated_at = to_iso(row.get("updated_at"))
                created_at = to_iso(row.get("created_at")) or updated_at
            except ValueError:
                yield Problem("credentials", user_id, f"credential {cred_id!r}", "unreadable time")
                continue
            if updated_at is None or created_at is None:
                yield Problem("credentials", user_id, f"credential {cred_id!r}", "no updated_at")
                continue
            yield CredentialRecord(user_id, cred_id, str(row["encrypted_value"]), created_at, updated_at)

    def _read_outbox(self) -> Iterator[OutboxRecord | Problem]:
        for row in self.source.rows("message_outbox", order_by=("id",)):
            user_id, message_id = str(row["user_id"]), str(row["message_id"])
            try:
                created_at = to_ms(row["created_at"])
                delivered_at = to_ms(row.get("delivered_at"))
                acked_at = to_ms(row.get("acked_at"))
            except ValueError:
                yield Problem("outbox", user_id, f"outbox {message_id!r}", "unreadable time")
                continue
            assert created_at is not None
            yield OutboxRecord(
                user_id=user_id,
                id=int(row["id"]),
                message_id=message_id,
                task_uuid=row.get("task_uuid"),
                session_id=row.get("session_id"),
                message_index=_opt_int(row.get("message_index")),
                total_messages=_opt_int(row.get("total_messages")),
                payload=str(row["payload"]),
                created_at=created_at,
                delivered_at=delivered_at,
                acked_at=acked_at,
            )

    def _read_owners(self) -> Iterator[OwnerRecord | Problem]:
        for row in self.source.rows("cloud_data_owners", order_by=("user_id", "owner_type", "owner_id")):
            yield OwnerRecord(
                user_id=str(row["user_id"]),
                owner_type=str(row["owner_type"]),
                owner_id=str(row["owner_id"]),
                active=bool(int(row["active"])),
                generation=int(row["generation"]),
                updated_at=to_ms(row.get("updated_at")) or 0,
            )

    def _read_sidecars(self) -> Iterator[SidecarRecord | Problem]:
        for row in self.source.rows("cloud_resource_metadata", order_by=("user_id", "resource_key")):
            user_id, value = str(row["user_id"]), str(row["encrypted_value"])
            ref_gen = self._owner_of(user_id, value, "")
            yield SidecarRecord(
                user_id, str(row["resource_key"]), value, ref_gen[0] if ref_gen else None, ref_gen[1] if ref_gen else 0
            )

    def _read_records(self) -> Iterator[CloudRecord | Problem]:
        has_chunks = "cloud_data_record_chunks" in self._tables
        for row in self.source.rows("cloud_data_records", order_by=("user_id", "kind", "id")):
            user_id, kind, record_id = str(row["user_id"]), str(row["kind"]), str(row["id"])
            ref = f"record {kind}/{record_id}"
            data = str(row["data"])
            if data.startswith(RECORD_CHUNK_MARKER):
                count_text = data[len(RECORD_CHUNK_MARKER) :]
                parts: dict[int, str] = {}
                if has_chunks:
                    for chunk in self.source.rows(
                        "cloud_data_record_chunks", where={"user_id": user_id, "kind": kind, "id": record_id}
                    ):
                        if chunk.get("write_token") == row.get("write_token"):
                            parts[int(chunk["chunk_index"])] = str(chunk["value"])
                if not count_text.isdigit() or sorted(parts) != list(range(int(count_text))):
                    yield Problem("records", user_id, ref, "incomplete chunked record")
                    continue
                data = "".join(parts[i] for i in range(int(count_text)))
            try:
                updated_at = to_ms(row.get("updated_at")) or 0
                lease_until = to_ms(row.get("lease_until"))
            except ValueError:
                yield Problem("records", user_id, ref, "unreadable time")
                continue
            yield CloudRecord(
                user_id=user_id,
                kind=kind,
                id=record_id,
                data=data,
                idempotency_key=row.get("idempotency_key"),
                updated_at=updated_at,
                lease_until=lease_until,
                lease_token=row.get("lease_token"),
            )


def parse_resource_key(resource_key: str) -> list[Any] | None:
    try:
        parsed = json.loads(resource_key)
    except ValueError:
        return None
    return parsed if isinstance(parsed, list) and parsed and isinstance(parsed[0], str) else None
