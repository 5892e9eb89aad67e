"""Owner guards under real concurrency (DynamoDB Local): writers for one owner race its retirement.

Whatever the interleaving, the retirement and each guarded write are ordered by DynamoDB on the owner item:
every write that started after the retirement committed is refused with ``CLOUD_OWNER_RETIRED``, every write
reported as committed is in the table, every refused one left nothing behind, and no push is claimed for
sending after the retirement. Another owner's writes are never affected.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest
from amsg.adapters.dynamo.client_state import DynamoClientStateStore
from amsg.adapters.dynamo.credentials import DynamoCredentialStore
from amsg.adapters.dynamo.outbox import DynamoOutboxStore
from amsg.adapters.dynamo.owners import DynamoOwnerStore
from amsg.adapters.dynamo.table import DynamoTable
from amsg.adapters.dynamo.tasks import DynamoTaskStore
from amsg.crypto import encrypt_for_storage
from amsg.domain.ownership import owner_ref
from amsg.errors import CloudGuardError
from amsg.ports import CredentialWrite, NewTask, OutboxAppend, OwnerClaim, StateWrite

from tests.support import ddb_local as _ddb_local

pytestmark = pytest.mark.ddb_local

ddb_local_endpoint = _ddb_local.ddb_local_endpoint
ddb_local_client = _ddb_local.ddb_local_client
ddb_local_table = _ddb_local.ddb_local_table

KEY = "ab" * 32
NOW = 1_900_000_000_000
ALICE = owner_ref("character", "alice")
BOB = owner_ref("character", "bob")


def table(endpoint: str, name: str) -> DynamoTable:
    return DynamoTable(name, endpoint_url=endpoint, region="us-east-1")


class Log:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.committed: list[tuple[str, str, str]] = []  # (kind, id, owner)
        self.refused: list[tuple[str, str, str, float]] = []  # (kind, id, owner, started)
        self.after_fence_committed: list[tuple[str, str]] = []
        self.errors: list[BaseException] = []


def writer(endpoint: str, name: str, user: str, owner: str, kind: str, log: Log, fence: dict, stop: threading.Event):
    try:
        _write_loop(endpoint, name, user, owner, kind, log, fence, stop)
    except BaseException as exc:  # surfaced by the test
        with log.lock:
            log.errors.append(exc)


def _write_loop(endpoint: str, name: str, user: str, owner: str, kind: str, log: Log, fence: dict, stop):
    t = table(endpoint, name)
    tasks, state, creds = DynamoTaskStore(t), DynamoClientStateStore(t), DynamoCredentialStore(t)
    claim = OwnerClaim(ref=owner, generation=0, meta=encrypt_for_storage("{}", KEY))
    n = 0
    while not stop.is_set():
        n += 1
        ident = f"{owner[:6]}-{kind}-{n}"
        started = time.monotonic()
        fenced_before = fence.get("at") is not None and fence["at"] < started
        try:
            if kind == "task":
                tasks.create_task(
                    NewTask(user, str(uuid.uuid4()) + ident, encrypt_for_storage("{}", KEY), "fixed",
                            1_893_456_000_000, 1_893_369_600_000, owner=claim)
                )  # fmt: skip
            elif kind == "state":
                state.upsert(
                    user, [StateWrite("race", ident, encrypt_for_storage("v", KEY), NOW, 1, owner=claim)], now_ms=NOW
                )
            else:
                creds.upsert(
                    user,
                    [CredentialWrite(ident, encrypt_for_storage("{}", KEY), owner=claim)],
                    NOW,
                )
        except CloudGuardError as exc:
            assert exc.code == "CLOUD_OWNER_RETIRED"
            with log.lock:
                log.refused.append((kind, ident, owner, started))
            continue
        with log.lock:
            log.committed.append((kind, ident, owner))
            if fenced_before and owner == ALICE:
                log.after_fence_committed.append((kind, ident))


def test_no_guarded_write_commits_after_the_retirement(ddb_local_endpoint, ddb_local_table):
    user = str(uuid.uuid4())
    log, fence, stop = Log(), {}, threading.Event()
    threads = [
        threading.Thread(target=writer, args=(ddb_local_endpoint, ddb_local_table, user, owner, kind, log, fence, stop))
        for owner in (ALICE, BOB)
        for kind in ("task", "state", "credential")
    ]
    for thread in threads:
        thread.start()
    time.sleep(1.0)
    owners = DynamoOwnerStore(table(ddb_local_endpoint, ddb_local_table))
    owners.set_active(user, ALICE, "character", "alice", active=False, expected=0, now_ms=NOW)
    fence["at"] = time.monotonic()
    time.sleep(1.0)
    stop.set()
    for thread in threads:
        thread.join(timeout=120)

    assert log.errors == []
    assert log.after_fence_committed == []
    alice_refused = [r for r in log.refused if r[2] == ALICE]
    assert alice_refused and all(r[2] == ALICE for r in log.refused)  # Bob is never refused
    assert any(kind == "task" for kind, _, owner in log.committed if owner == BOB)
    # the table holds exactly what was reported committed, nothing of what was refused
    t = table(ddb_local_endpoint, ddb_local_table)
    stored = {i["uuid"].removeprefix(i["uuid"][:36]) for i in t.query_prefix(f"U#{user}", "T#")}
    stored |= {i["key"] for i in t.query_prefix(f"U#{user}", "S#")}
    stored |= {i["cred_id"] for i in t.query_prefix(f"U#{user}", "C#")}
    committed = {ident for _, ident, _ in log.committed}
    assert stored == committed


def test_no_push_is_claimed_after_the_retirement(ddb_local_endpoint, ddb_local_table):
    """The push claim's owner check: rows appended before the fence are never taken for sending after it."""
    t = table(ddb_local_endpoint, ddb_local_table)
    user = str(uuid.uuid4())
    tasks, outbox, owners = DynamoTaskStore(t), DynamoOutboxStore(t), DynamoOwnerStore(t)
    claim = OwnerClaim(ref=ALICE, generation=0, meta=encrypt_for_storage("{}", KEY))
    task_uuid = str(uuid.uuid4())
    tasks.create_task(NewTask(user, task_uuid, encrypt_for_storage("{}", KEY), "fixed",
                              1_893_456_000_000, 1_893_369_600_000, owner=claim))  # fmt: skip
    t.table.update_item(
        Key={"PK": f"U#{user}", "SK": f"T#{task_uuid}"},
        UpdateExpression="SET claim_version = :cv, lease_until = :lu",
        ExpressionAttributeValues={":cv": 1, ":lu": "2999-01-01T00:00:00.000Z"},
    )
    ids = [f"m{i}" for i in range(120)]
    outbox.append(
        user, [OutboxAppend(m, encrypt_for_storage("{}", KEY), NOW, task_uuid=task_uuid, owner=claim) for m in ids]
    )
    taken: list[str] = []
    refused: list[str] = []
    late: list[str] = []
    errors: list[str] = []
    fence: dict[str, Any] = {}
    lock = threading.Lock()

    def sender(part: list[str]) -> None:
        store = DynamoOutboxStore(table(ddb_local_endpoint, ddb_local_table))
        for message_id in part:
            started = time.monotonic()
            try:
                ok = store.claim_send(user, message_id, task_uuid=task_uuid, claim_version=1, now_ms=NOW, owner=claim)
            except CloudGuardError:
                with lock:
                    refused.append(message_id)
                continue
            with lock:
                (taken if ok else errors).append(message_id)
                if fence.get("at") is not None and fence["at"] < started:
                    late.append(message_id)

    def retire() -> None:
        time.sleep(0.05)
        DynamoOwnerStore(table(ddb_local_endpoint, ddb_local_table)).set_active(
            user, ALICE, "character", "alice", active=False, expected=0, now_ms=NOW
        )
        fence["at"] = time.monotonic()

    threads = [threading.Thread(target=sender, args=(ids[i::4],)) for i in range(4)] + [threading.Thread(target=retire)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert late == [] and errors == []
    assert refused, "the retirement landed after every claim; the race was not exercised"
    assert sorted(taken + refused) == sorted(ids)
    rows = {i["message_id"]: i for i in t.query_prefix(f"U#{user}", "O#")}
    assert {m for m, row in rows.items() if "sending_at" in row} == set(taken)
    assert owners.guard_holds(user, ALICE, 0) is False
