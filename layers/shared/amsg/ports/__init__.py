"""Ports: the small interfaces the API and engine code depend on. Adapters implement them.

One module per concept (tasks, claims, outbox, credentials, client state, delivery policy, cloud data, LLM,
Web Push, and what runs the engine: clock, queue, call coalescer); every public name is re-exported here, so
``from amsg.ports import X`` is the way to use them. Rows are plain dataclasses; payloads stay encrypted (storage
format) until the domain decrypts them with the user's key, so an adapter never sees plaintext task content.
"""

from __future__ import annotations

from amsg.ports.claims import (
    APPEND_FALLBACK,
    CLAIM_ALONE,
    KEEP,
    AppendFallback,
    ClaimAlone,
    ClaimStore,
    ClaimWanted,
    DueCandidate,
    DuePageToken,
    Keep,
    RunSnapshot,
    Settlement,
)
from amsg.ports.client_state import (
    ClientStateStore,
    NamespaceListing,
    NamespaceStats,
    StateRow,
    StateWrite,
    StateWriteResult,
)
from amsg.ports.cloud_data import CloudDataStore, LeasedWrite, OwnerState, OwnerStore, ResourceListing, StoredResource
from amsg.ports.credentials import CredentialStore, CredentialWrite
from amsg.ports.delivery_policy import CapCharge, CapReached, DeliveryPolicyRow, DeliveryPolicyStore
from amsg.ports.execution import CallCoalescer, Clock, CoalescingScope, TaskQueue
from amsg.ports.llm import LlmClient, LlmReply, LlmRequest
from amsg.ports.outbox import ClaimFence, OutboxAppend, OutboxRow, OutboxStore
from amsg.ports.push import MAX_PUSH_PAYLOAD_BYTES, SCHEDULED_PUSH_TTL_S, PushKeys, PushSender, PushSubscription
from amsg.ports.tasks import (
    CreatedTask,
    CreatePrep,
    NewTask,
    OwnerClaim,
    PushSubscriptionRow,
    PushSubscriptionStore,
    SchemaInspector,
    SchemaItem,
    SchemaReport,
    TaskRow,
    TaskStore,
)
from amsg.ports.tenants import (
    KeyUnwrapError,
    KeyWrapper,
    MasterKeys,
    TenantAccess,
    TenantAccessor,
    TenantDirectory,
    TenantExists,
    TenantNotFound,
    TenantPage,
    TenantRecord,
    TenantStore,
)

__all__ = [
    "APPEND_FALLBACK",
    "CLAIM_ALONE",
    "KEEP",
    "MAX_PUSH_PAYLOAD_BYTES",
    "SCHEDULED_PUSH_TTL_S",
    "AppendFallback",
    "CallCoalescer",
    "CapCharge",
    "CapReached",
    "ClaimAlone",
    "ClaimFence",
    "ClaimStore",
    "ClaimWanted",
    "ClientStateStore",
    "Clock",
    "CloudDataStore",
    "CoalescingScope",
    "CreatePrep",
    "CreatedTask",
    "CredentialStore",
    "CredentialWrite",
    "DeliveryPolicyRow",
    "DeliveryPolicyStore",
    "DueCandidate",
    "DuePageToken",
    "Keep",
    "KeyUnwrapError",
    "KeyWrapper",
    "LeasedWrite",
    "LlmClient",
    "LlmReply",
    "LlmRequest",
    "MasterKeys",
    "NamespaceListing",
    "NamespaceStats",
    "NewTask",
    "OutboxAppend",
    "OutboxRow",
    "OutboxStore",
    "OwnerClaim",
    "OwnerState",
    "OwnerStore",
    "PushKeys",
    "PushSender",
    "PushSubscription",
    "PushSubscriptionRow",
    "PushSubscriptionStore",
    "ResourceListing",
    "RunSnapshot",
    "SchemaInspector",
    "SchemaItem",
    "SchemaReport",
    "Settlement",
    "StateRow",
    "StateWrite",
    "StateWriteResult",
    "StoredResource",
    "TaskQueue",
    "TaskRow",
    "TaskStore",
    "TenantAccess",
    "TenantAccessor",
    "TenantDirectory",
    "TenantExists",
    "TenantNotFound",
    "TenantPage",
    "TenantRecord",
    "TenantStore",
]
