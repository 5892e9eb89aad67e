"""In-memory fakes of the storage ports, for tests that need storage semantics but no DynamoDB.

They are checked against the DynamoDB adapter by the shared contract suite in ``tests/contract/`` (run on
the fakes, on moto and on DynamoDB Local), so a fake that drifts from the adapter fails there first.
"""

from tests.support.fakes.claims import FencedMemoryOutboxStore, MemoryClaimStore
from tests.support.fakes.client_state import MemoryClientStateStore
from tests.support.fakes.cloud_data import MemoryCloudDataStore, MemoryOwnerStore
from tests.support.fakes.context import memory_context
from tests.support.fakes.memory import (
    MemoryCredentialStore,
    MemoryDeliveryPolicyStore,
    MemoryOutboxStore,
    MemoryPushSubscriptionStore,
    NotFaked,
)
from tests.support.fakes.tasks import MemoryTaskStore

__all__ = [
    "FencedMemoryOutboxStore",
    "MemoryClaimStore",
    "MemoryClientStateStore",
    "MemoryCloudDataStore",
    "MemoryCredentialStore",
    "MemoryDeliveryPolicyStore",
    "MemoryOutboxStore",
    "MemoryOwnerStore",
    "MemoryPushSubscriptionStore",
    "MemoryTaskStore",
    "NotFaked",
    "memory_context",
]
