"""An ``AppContext`` on the in-memory stores: what the Lambda handlers see, minus DynamoDB.

The schema inspector has no fake: a stand-in raises :class:`NotFaked` on first use (as do the cloud-data
inventory and the owner guards of ordinary writes), so a route that needs them fails loudly, never half-working.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from amsg.clock import FixedClock
from amsg.context import AppContext, StoragePorts
from amsg.ports import TaskQueue

from tests.support.fakes.claims import FencedMemoryOutboxStore, MemoryClaimStore
from tests.support.fakes.client_state import MemoryClientStateStore
from tests.support.fakes.cloud_data import MemoryCloudDataStore, MemoryOwnerStore
from tests.support.fakes.memory import (
    MemoryCredentialStore,
    MemoryDeliveryPolicyStore,
    MemoryPushSubscriptionStore,
    NotFaked,
)
from tests.support.fakes.tasks import MemoryTaskStore


class Unfaked:
    """Stands in for a port the fakes do not implement."""

    def __init__(self, port: str) -> None:
        self._port = port

    def __getattr__(self, name: str) -> Any:
        raise NotFaked(f"{self._port}.{name} has no in-memory fake: use the moto `ctx` fixture")


def memory_context(env: Mapping[str, str], now_ms: int, queue: TaskQueue | None = None) -> AppContext:
    """Settings, secrets and delivery collaborators exactly as :func:`amsg.runtime.build_context` makes them
    from ``env``; the storage ports are in-memory fakes (tasks, claims and outbox under one lock), the clock is
    fixed at ``now_ms`` and ``queue``, when given, is the delivery queue."""
    from amsg.runtime import delivery_ports, secrets_from_env, settings_from_env

    settings = settings_from_env(env)
    secrets = secrets_from_env(env)
    subscriptions = MemoryPushSubscriptionStore()
    tasks = MemoryTaskStore(subscriptions)
    policies = MemoryDeliveryPolicyStore(lock=tasks._lock)
    outbox = FencedMemoryOutboxStore(tasks, policies)
    owners = MemoryOwnerStore()
    storage = StoragePorts(
        tasks=tasks,
        claims=MemoryClaimStore(tasks, outbox, subscriptions, policies, due_shards=settings.due_shards),
        subscriptions=subscriptions,
        outbox=outbox,
        schema=Unfaked("SchemaInspector"),  # type: ignore[arg-type]
        credentials=MemoryCredentialStore(),
        client_state=MemoryClientStateStore(),
        owners=owners,
        policies=policies,
        cloud_data=MemoryCloudDataStore(owners),  # its inventory half raises NotFaked
        coalescer=None,  # no coalescing: each call is its own request, a valid configuration
    )
    delivery = delivery_ports(settings, secrets)
    if queue is not None:
        delivery = dataclasses.replace(delivery, make_queue=lambda: queue)
    return AppContext(
        settings=settings,
        secrets=secrets,
        clock=FixedClock(now_ms),
        delivery=delivery,
        storage=lambda: storage,
        optional_ports=frozenset({"owners", "policies", "cloud_data"}),
    )
