"""The outbox fake and the DynamoDB adapter (on moto) driven by the same random operation sequences: every
result and every read-back must agree. This finds the drift the example tests in test_outbox_contract.py did
not think of."""

from __future__ import annotations

import uuid
from typing import Any

from amsg.ports import OutboxAppend, OutboxRow
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import T0_MS
from tests.contract.conftest import dynamo_stores, memory_stores

DAY = 86_400_000
TASKS = ["task-a", "task-a#1", None]
message_ids = st.sampled_from(["m1", "m2", "m3", "m4", "m5"])
moments = st.integers(min_value=0, max_value=40).map(lambda days: T0_MS + days * DAY)

appends = st.lists(
    st.tuples(message_ids, moments, st.sampled_from(TASKS), st.sampled_from(["p", "q"])), min_size=1, max_size=4
).map(lambda rows: ("append", rows))
operations = st.one_of(
    appends,
    st.tuples(st.just("ack"), st.lists(message_ids, max_size=3), moments),
    st.tuples(st.just("mark_delivered"), st.lists(message_ids, max_size=3), moments),
    st.tuples(st.just("discard_undelivered"), st.lists(message_ids, max_size=3)),
    st.tuples(st.just("discard_undelivered_for_task"), st.sampled_from(TASKS[:2])),
    st.tuples(st.just("delete"), st.one_of(st.none(), st.lists(message_ids, max_size=3)), moments),
    st.tuples(st.just("release_send"), message_ids),
)


def apply(store: Any, user: str, op: tuple) -> Any:
    name, *args = op
    if name == "append":
        rows = [OutboxAppend(m, f"{p}-{m}", created, task_uuid=task) for m, created, task, p in args[0]]
        return store.append(user, rows)
    if name in ("ack", "mark_delivered", "delete"):
        return getattr(store, name)(user, args[0], args[1])
    return getattr(store, name)(user, *args)


def shape(rows: list[OutboxRow]) -> list[tuple]:
    return [(r.id, r.message_id, r.encrypted_push, r.created_at, r.task_uuid, r.delivered_at, r.acked_at) for r in rows]


def observe(store: Any, user: str, now: int) -> tuple:
    return (
        shape(store.list_unacked(user, 0, 100, now)),
        shape(store.list_unacked(user, 2, 2, now)),
        *(shape(store.list_for_task(user, task, since_ms=T0_MS + DAY)) for task in TASKS[:2]),
    )


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(operations, min_size=1, max_size=12), now=moments)
def test_the_fake_and_the_adapter_agree(moto_table: str, ops: list[tuple], now: int) -> None:
    user = f"u-{uuid.uuid4()}"  # a fresh partition per example: the table outlives the examples
    fake, real = memory_stores().outbox, dynamo_stores(moto_table).outbox
    for op in ops:
        assert apply(fake, user, op) == apply(real, user, op), op
        assert observe(fake, user, now) == observe(real, user, now), op
