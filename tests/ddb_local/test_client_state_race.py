"""client_state last-write-wins under real concurrency (DynamoDB Local: real transactions, real conflicts).

Writers race on the same keys with different guards; whatever the interleaving, the value with the highest guard
must be the one left, a reader must never see a key's guard go backwards, and large values must never be read
half-written or leave parts behind.
"""

from __future__ import annotations

import random
import threading
import uuid
from typing import Any

import pytest
from amsg.adapters.dynamo.client_state import DynamoClientStateStore
from amsg.adapters.dynamo.table import DynamoTable
from amsg.crypto import decrypt_from_storage, encrypt_for_storage
from amsg.ports import StateWrite

from tests.support import ddb_local as _ddb_local

pytestmark = pytest.mark.ddb_local

# the session's DynamoDB Local and a fresh table built from template.yaml (tests/support/ddb_local.py)
ddb_local_endpoint = _ddb_local.ddb_local_endpoint
ddb_local_client = _ddb_local.ddb_local_client
ddb_local_table = _ddb_local.ddb_local_table

KEY = "cd" * 32
NOW = 1_900_000_000_000


def make_store(endpoint: str, table: str) -> DynamoClientStateStore:
    """One store per thread: boto3 resources are not thread-safe."""
    return DynamoClientStateStore(DynamoTable(table, endpoint_url=endpoint, region="us-east-1"))


def write(guard: int, text: str, key: str = "k", namespace: str = "race") -> StateWrite:
    return StateWrite(namespace, key, encrypt_for_storage(text, KEY), guard, len(text.encode("utf-8")))


def run_threads(targets: list[Any]) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(targets))

    def wrap(fn):
        def run():
            try:
                barrier.wait()
                fn()
            except BaseException as exc:  # surfaced below
                errors.append(exc)

        return run

    threads = [threading.Thread(target=wrap(fn)) for fn in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors


def read(store: DynamoClientStateStore, user: str, namespace: str = "race") -> dict[str, tuple[str, int]]:
    return {
        row.key: (decrypt_from_storage(row.value, KEY), row.updated_at) for row in store.get_namespace(user, namespace)
    }


def test_racing_writers_never_lose_the_newest_value(ddb_local_endpoint, ddb_local_table):
    user = str(uuid.uuid4())
    writers = 6
    rounds = 25
    guards = list(range(1, writers * rounds + 1))
    random.Random(7).shuffle(guards)
    plan = [guards[i::writers] for i in range(writers)]
    observed: list[int] = []
    stop = threading.Event()
    outcomes: dict[int, bool] = {}

    def writer(my_guards: list[int]):
        store = make_store(ddb_local_endpoint, ddb_local_table)
        for guard in my_guards:
            result = store.upsert(user, [write(guard, f"value-{guard}")], now_ms=NOW)
            outcomes[guard] = result.outcomes[0]

    def reader():
        store = make_store(ddb_local_endpoint, ddb_local_table)
        while not stop.is_set():
            rows = read(store, user)
            if "k" in rows:
                value, guard = rows["k"]
                assert value == f"value-{guard}"
                observed.append(guard)

    reader_thread = threading.Thread(target=reader)
    reader_thread.start()
    try:
        run_threads([lambda g=g: writer(g) for g in plan])
    finally:
        stop.set()
        reader_thread.join(timeout=60)

    top = max(guards)
    assert read(make_store(ddb_local_endpoint, ddb_local_table), user) == {"k": (f"value-{top}", top)}
    assert outcomes[top] is True
    assert observed == sorted(observed), "a reader saw the stored guard go backwards"


def test_two_writers_racing_a_batch_of_keys(ddb_local_endpoint, ddb_local_table):
    """Two batches over the same 40 keys (one transaction each), older and newer, raced repeatedly."""
    user = str(uuid.uuid4())
    keys = [f"key-{i:02d}" for i in range(40)]
    for attempt in range(5):
        older, newer = 1_000 + 2 * attempt, 1_001 + 2 * attempt

        def batch(guard: int):
            store = make_store(ddb_local_endpoint, ddb_local_table)
            store.upsert(user, [write(guard, f"{k}@{guard}", key=k) for k in keys], now_ms=NOW)

        run_threads([lambda: batch(older), lambda: batch(newer)])
        rows = read(make_store(ddb_local_endpoint, ddb_local_table), user)
        assert rows == {k: (f"{k}@{newer}", newer) for k in keys}


def test_large_values_racing_stay_whole_and_leave_no_parts(ddb_local_endpoint, ddb_local_table, ddb_local_client):
    user = str(uuid.uuid4())
    size = 400_000  # ciphertext ~800 KB: three parts per value
    guards = [10, 20, 30, 40]

    def writer(guard: int):
        store = make_store(ddb_local_endpoint, ddb_local_table)
        store.upsert(user, [write(guard, chr(0x41 + guard // 10) * size, namespace="big")], now_ms=NOW)

    run_threads([lambda g=g: writer(g) for g in guards])
    rows = read(make_store(ddb_local_endpoint, ddb_local_table), user, "big")
    assert rows == {"k": (chr(0x41 + 4) * size, 40)}

    parts = ddb_local_client.query(
        TableName=ddb_local_table,
        KeyConditionExpression="PK = :pk AND begins_with(SK, :p)",
        ExpressionAttributeValues={":pk": {"S": f"U#{user}"}, ":p": {"S": "SC#"}},
    )["Items"]
    tokens = {item["SK"]["S"].rsplit("#", 1)[0] for item in parts}
    assert len(tokens) == 1, "superseded or losing parts were left behind"


def test_delete_racing_older_writes(ddb_local_endpoint, ddb_local_table):
    """A delete with the newest guard races older writes: each older write either lands before the delete (and
    is deleted) or after it (an absent key accepts any guard) — but the delete itself is never undone by a write
    that read the row before it."""
    user = str(uuid.uuid4())
    store = make_store(ddb_local_endpoint, ddb_local_table)
    store.upsert(user, [write(100, "base")], now_ms=NOW)
    results: dict[str, Any] = {}

    def deleter():
        results["delete"] = make_store(ddb_local_endpoint, ddb_local_table).upsert(
            user, [StateWrite("race", "k", None, 500)], now_ms=NOW
        )

    def older_writer():
        results["write"] = make_store(ddb_local_endpoint, ddb_local_table).upsert(
            user, [write(200, "older")], now_ms=NOW
        )

    run_threads([deleter, older_writer])
    assert results["delete"].deleted == 1
    final = read(store, user)
    if results["write"].upserted:
        # linearized either before the delete (gone now) or after it (present): both are serial outcomes
        assert final in ({}, {"k": ("older", 200)})
    else:
        assert final == {}
