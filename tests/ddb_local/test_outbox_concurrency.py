"""Outbox ids under real concurrency, on DynamoDB Local (moto's transactions are not atomic under threads)."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from amsg.ports import OutboxAppend

from tests.support.ddb_engine import T0_MS, ddb_context

pytestmark = pytest.mark.ddb_local


@pytest.fixture
def ctx(ddb_local_endpoint, ddb_local_table, monkeypatch):
    # ddb_context points boto3 at DynamoDB Local through the environment: undo that after the test so later
    # moto-based tests do not talk to DynamoDB Local
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", ddb_local_endpoint)
    return ddb_context(ddb_local_endpoint, ddb_local_table)


def test_concurrent_appends_get_distinct_ids_and_paging_sees_each_once(ctx):
    user = str(uuid.uuid4())
    writers, per_writer = 5, 12
    barrier = threading.Barrier(writers + 1)
    seen: list[int] = []
    done = threading.Event()

    def write(w: int) -> list[int]:
        barrier.wait()
        ids: list[int] = []
        for i in range(per_writer):
            rows = [OutboxAppend(f"w{w}-{i}-{j}", "00:00:00", T0_MS, task_uuid=f"task-{w}") for j in range(2)]
            ids += ctx.outbox.append(user, rows)
        return ids

    def read() -> None:
        barrier.wait()
        since = 0
        while True:
            finished = done.is_set()
            rows = ctx.outbox.list_unacked(user, since, 7, T0_MS)
            seen.extend(row.id for row in rows)
            if rows:
                since = rows[-1].id
            elif finished:
                return

    reader = threading.Thread(target=read)
    reader.start()
    with ThreadPoolExecutor(writers) as pool:
        per_worker = list(pool.map(write, range(writers)))
    done.set()
    reader.join()

    total = writers * per_writer * 2
    ids = sorted(i for worker_ids in per_worker for i in worker_ids)
    assert ids == list(range(1, total + 1))  # distinct and gap-free
    for worker_ids in per_worker:
        assert worker_ids == sorted(worker_ids)
    assert seen == list(range(1, total + 1))  # a reader paging concurrently never skips or repeats
