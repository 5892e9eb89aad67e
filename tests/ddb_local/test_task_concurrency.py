"""Atomicity claims proven on DynamoDB Local (moto's conditional writes are not atomic under threads)."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from amsg.errors import TaskUuidConflict
from amsg.ports import NewTask

from tests.support.ddb_engine import ddb_context

pytestmark = pytest.mark.ddb_local


def _task(user_id: str, task_uuid: str) -> NewTask:
    return NewTask(
        user_id=user_id,
        uuid=task_uuid,
        encrypted_payload="00:00:00",
        message_type="fixed",
        next_send_at_ms=1_893_456_000_000,  # 2030-01-01T00:00:00.000Z
        now_ms=1_893_369_600_000,  # 2029-12-31T00:00:00.000Z
    )


def test_concurrent_creates_with_one_uuid_exactly_one_wins(ddb_local_endpoint, ddb_local_table):
    ctx = ddb_context(ddb_local_endpoint, ddb_local_table)
    for _ in range(10):
        shared = str(uuid.uuid4())
        barrier = threading.Barrier(8)

        def create(_: int, shared: str = shared, barrier: threading.Barrier = barrier) -> str:
            user = str(uuid.uuid4())
            barrier.wait()
            try:
                ctx.tasks.create_task(_task(user, shared))
                return "won"
            except TaskUuidConflict:
                return "conflict"

        with ThreadPoolExecutor(8) as pool:
            outcomes = list(pool.map(create, range(8)))
        assert outcomes.count("won") == 1, outcomes
        assert outcomes.count("conflict") == 7


def test_concurrent_creates_for_one_user_get_distinct_increasing_ids(ddb_local_endpoint, ddb_local_table):
    ctx = ddb_context(ddb_local_endpoint, ddb_local_table)
    user = str(uuid.uuid4())
    per_thread = 15
    barrier = threading.Barrier(6)

    def create_many(_: int) -> list[int]:
        barrier.wait()
        return [ctx.tasks.create_task(_task(user, str(uuid.uuid4()))).id for _ in range(per_thread)]

    with ThreadPoolExecutor(6) as pool:
        per_worker = list(pool.map(create_many, range(6)))
    ids = [i for ids in per_worker for i in ids]
    assert sorted(ids) == list(range(1, 6 * per_thread + 1))  # distinct, gap-free
    for ids_of_worker in per_worker:
        assert ids_of_worker == sorted(ids_of_worker)  # each writer sees its ids increase
    stored = sorted(row.id for row in ctx.tasks.list_tasks(user))
    assert stored == list(range(1, 6 * per_thread + 1))
