"""The contract suite: every test runs on the in-memory fakes, on the DynamoDB adapter over moto and on the
DynamoDB adapter over DynamoDB Local (marked ``ddb_local``). A fake that drifts from the adapter fails here."""

from __future__ import annotations

import types
from collections.abc import Iterator

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

    return types.SimpleNamespace(
        outbox=fakes.MemoryOutboxStore(),
        credentials=fakes.MemoryCredentialStore(),
        subscriptions=fakes.MemoryPushSubscriptionStore(),
        policies=fakes.MemoryDeliveryPolicyStore(),
    )


def dynamo_stores(table_name: str, endpoint_url: str | None = None) -> types.SimpleNamespace:
    from amsg.adapters.dynamo.credentials import DynamoCredentialStore
    from amsg.adapters.dynamo.delivery_policy import DynamoDeliveryPolicyStore
    from amsg.adapters.dynamo.outbox import DynamoOutboxStore
    from amsg.adapters.dynamo.subscriptions import DynamoPushSubscriptionStore
    from amsg.adapters.dynamo.table import DynamoTable

    table = DynamoTable(table_name, endpoint_url=endpoint_url)
    return types.SimpleNamespace(
        outbox=DynamoOutboxStore(table),
        credentials=DynamoCredentialStore(table),
        subscriptions=DynamoPushSubscriptionStore(table),
        policies=DynamoDeliveryPolicyStore(table),
    )


@pytest.fixture(params=BACKENDS)
def stores(request: pytest.FixtureRequest) -> Iterator[types.SimpleNamespace]:
    """The storage ports under test, on one backend: ``outbox``, ``credentials``, ``subscriptions``,
    ``policies``."""
    if request.param == "memory":
        yield memory_stores()
    elif request.param == "moto":
        request.getfixturevalue("moto_table")
        from tests.conftest import TABLE

        yield dynamo_stores(TABLE)
    else:
        name = request.getfixturevalue("ddb_local_table")
        yield dynamo_stores(name, request.getfixturevalue("ddb_local_endpoint"))
