"""The contract suite: every test runs on the in-memory fakes, on the DynamoDB adapter over moto and on the
DynamoDB adapter over DynamoDB Local (marked ``ddb_local``). A fake that drifts from the adapter fails here."""

from __future__ import annotations

import types
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.ddb_local import (  # noqa: F401  (the session's DynamoDB Local, for the ddb_local backend)
    ddb_local_client,
    ddb_local_endpoint,
    ddb_local_server,
    ddb_local_table,
)

BACKENDS = [
    pytest.param("memory", id="memory"),
    pytest.param("moto", id="moto"),
    pytest.param("ddb_local", id="ddb_local", marks=pytest.mark.ddb_local),
]


def memory_stores() -> types.SimpleNamespace:
    from tests.support import fakes

    subscriptions = fakes.MemoryPushSubscriptionStore()
    tasks = fakes.MemoryTaskStore(subscriptions)
    policies = fakes.MemoryDeliveryPolicyStore(lock=tasks._lock)
    outbox = fakes.FencedMemoryOutboxStore(tasks, policies)  # its send claim is fenced by the task's claim
    return types.SimpleNamespace(
        outbox=outbox,
        client_state=fakes.MemoryClientStateStore(),
        credentials=fakes.MemoryCredentialStore(),
        subscriptions=subscriptions,
        policies=policies,
        tasks=tasks,
        claims=fakes.MemoryClaimStore(tasks, outbox, subscriptions, policies),
        set_delivery_state=tasks.set_delivery_state,
    )


def dynamo_stores(table_name: str, endpoint_url: str | None = None) -> types.SimpleNamespace:
    from amsg.adapters.dynamo.claims import DynamoClaimStore
    from amsg.adapters.dynamo.client_state import DynamoClientStateStore
    from amsg.adapters.dynamo.credentials import DynamoCredentialStore
    from amsg.adapters.dynamo.delivery_policy import DynamoDeliveryPolicyStore
    from amsg.adapters.dynamo.outbox import DynamoOutboxStore
    from amsg.adapters.dynamo.subscriptions import DynamoPushSubscriptionStore
    from amsg.adapters.dynamo.table import DynamoTable
    from amsg.adapters.dynamo.tasks import DynamoTaskStore

    # moto (no endpoint) runs no conditional PartiQL: single writes one request each there; DynamoDB Local: statements
    table = DynamoTable(table_name, endpoint_url=endpoint_url, statements=endpoint_url is not None)
    return types.SimpleNamespace(
        outbox=DynamoOutboxStore(table),
        client_state=DynamoClientStateStore(table),
        credentials=DynamoCredentialStore(table),
        subscriptions=DynamoPushSubscriptionStore(table),
        policies=DynamoDeliveryPolicyStore(table),
        tasks=DynamoTaskStore(table),
        claims=DynamoClaimStore(table),
        set_delivery_state=lambda user_id, uuid, **fields: _write_task_fields(table, user_id, uuid, fields),
    )


def _write_task_fields(table: Any, user_id: str, uuid: str, fields: dict[str, Any]) -> None:
    """What the delivery side writes on a task item (a lease, a retry, a deferral, a status), written directly:
    the contract of the API side only needs a task in that state. Times come as ``*_ms`` (the ports' form) and
    are stored as the adapter stores them (ISO text under the name without ``_ms``)."""
    from amsg.adapters.dynamo import keys
    from amsg.timeutil import iso_from_ms

    stored = {
        (name[:-3] if name.endswith("_ms") else name): (iso_from_ms(value) if name.endswith("_ms") else value)
        for name, value in fields.items()
    }
    names = {f"#f{i}": name for i, name in enumerate(stored)}
    values = {f":v{i}": value for i, value in enumerate(stored.values())}
    table.table.update_item(
        Key=keys.task_key(user_id, uuid),
        UpdateExpression="SET " + ", ".join(f"#f{i} = :v{i}" for i in range(len(stored))),
        ConditionExpression="attribute_exists(PK)",
        ExpressionAttributeNames=names,
        ExpressionAttributeValues=values,
    )


@pytest.fixture(params=BACKENDS)
def stores(request: pytest.FixtureRequest) -> Iterator[types.SimpleNamespace]:
    """The storage ports under test, on one backend: ``outbox``, ``credentials``, ``subscriptions``,
    ``policies``, ``tasks``, ``claims``, ``client_state`` (and ``set_delivery_state``, which puts a task in a
    state only the engine writes)."""
    if request.param == "memory":
        yield memory_stores()
    elif request.param == "moto":
        request.getfixturevalue("moto_table")
        from tests.conftest import TABLE

        yield dynamo_stores(TABLE)
    else:
        name = request.getfixturevalue("ddb_local_table")
        yield dynamo_stores(name, request.getfixturevalue("ddb_local_endpoint"))
