"""What an API or engine function is handed: settings, lazily resolved secrets, the clock and the ports."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from amsg.config import Secrets, Settings
from amsg.crypto import UserCodec, user_codec

if TYPE_CHECKING:  # annotations only: routes that touch no port never import amsg.ports (docs/cold-start.md)
    from amsg.ports import (
        CallCoalescer,
        ClaimStore,
        ClientStateStore,
        Clock,
        CloudDataStore,
        CredentialStore,
        DeliveryPolicyStore,
        KeyWrapper,
        LlmClient,
        OutboxStore,
        OwnerStore,
        PushSender,
        PushSubscriptionStore,
        SchemaInspector,
        TaskQueue,
        TaskStore,
        TenantAccessor,
        TenantDirectory,
        TenantStore,
    )
    from amsg.ports.tenant_purge import TenantPurge


@dataclass
class DeliveryPorts:
    """The delivery engine's collaborators, each built on first use: API routes that never deliver never import
    the push or LLM stack. ``push_sender`` is None while VAPID is incomplete (the tick then claims nothing) and
    ``queue`` is None without a queue URL."""

    make_push_sender: Callable[[], PushSender | None]
    make_llm: Callable[[], LlmClient]
    make_queue: Callable[[], TaskQueue | None]
    describe_push_problem: Callable[[], str | None] = lambda: None
    # the claim queue (claim fan-out, docs/delivery.md); None: the tick claims by itself, as before
    make_claim_queue: Callable[[], TaskQueue | None] = lambda: None
    sleep: Callable[[float], None] = time.sleep

    @property
    def push_sender(self) -> PushSender | None:
        """Asked each time: the factory keeps its own instance and rebuilds it when the VAPID key rotates."""
        return self.make_push_sender()

    @property
    def push_problem(self) -> str | None:
        """Why there is no push sender, naming the settings (asked after ``push_sender`` came back None)."""
        return self.describe_push_problem()

    @cached_property
    def llm(self) -> LlmClient:
        return self.make_llm()

    @cached_property
    def queue(self) -> TaskQueue | None:
        return self.make_queue()

    @cached_property
    def claim_queue(self) -> TaskQueue | None:
        return self.make_claim_queue()


@dataclass
class StoragePorts:
    """Everything backed by the table, built together (one table client) the first time a route needs any."""

    tasks: TaskStore
    claims: ClaimStore
    subscriptions: PushSubscriptionStore
    outbox: OutboxStore
    schema: SchemaInspector
    credentials: CredentialStore
    client_state: ClientStateStore
    owners: OwnerStore | None = None  # cloud-data owners and their guards
    policies: DeliveryPolicyStore | None = None  # quiet hours and frequency caps (None: no policy applies)
    cloud_data: CloudDataStore | None = None  # the /cloud-data inventory and its records
    coalescer: CallCoalescer | None = None  # a batch's concurrent records share storage round trips
    prepare: Callable[[], None] = lambda: None  # build the table's client now (init-phase work), send nothing
    # one tenant's ports on the same table client (docs/tenancy-data.md); None where there is no table to share
    # (in-memory fakes) and on ports already confined to a tenant
    for_tenant: Callable[[str], StoragePorts] | None = None
    # the multi-tenant line (None in single mode): the registry, tenants' master keys, the active tenants
    tenant_registry: TenantStore | None = None
    tenant_keys: TenantAccessor | None = None  # a MasterKeys that also answers the record (the edge's auth)
    tenants: TenantDirectory | None = None
    key_wrapper: KeyWrapper | None = None  # wraps a new tenant's master key (init-tenant, the CLI)
    tenant_purge: TenantPurge | None = None  # tenants' deletions, resumable (docs/tenancy-data.md)


class AppContext:
    """Settings, secrets, clock and ports. The storage ports are built on first use, so a route that never
    touches the table (capabilities, vapid-public-key, get-user-key) never imports boto3 or builds a client:
    see docs/cold-start.md. Each port can be replaced by assignment (tests do)."""

    def __init__(
        self,
        settings: Settings,
        secrets: Secrets,
        clock: Clock,
        delivery: DeliveryPorts,
        storage: Callable[[], StoragePorts],
        *,
        optional_ports: frozenset[str] = frozenset(),
    ) -> None:
        self.settings = settings
        self.secrets = secrets
        self.clock = clock
        self.delivery = delivery
        self._make_storage = storage
        self._optional_ports = optional_ports

    @cached_property
    def storage(self) -> StoragePorts:
        return self._make_storage()

    def provides(self, port: str) -> bool:
        """Whether an optional port (``owners``, ``policies``, ``cloud_data``, ``coalescer``) is configured,
        answered without building the storage."""
        return port in self._optional_ports

    @cached_property
    def tasks(self) -> TaskStore:
        return self.storage.tasks

    @cached_property
    def claims(self) -> ClaimStore:
        return self.storage.claims

    @cached_property
    def subscriptions(self) -> PushSubscriptionStore:
        return self.storage.subscriptions

    @cached_property
    def outbox(self) -> OutboxStore:
        return self.storage.outbox

    @cached_property
    def schema(self) -> SchemaInspector:
        return self.storage.schema

    @cached_property
    def credentials(self) -> CredentialStore:
        return self.storage.credentials

    @cached_property
    def client_state(self) -> ClientStateStore:
        return self.storage.client_state

    @cached_property
    def owners(self) -> OwnerStore | None:
        return self.storage.owners

    @cached_property
    def policies(self) -> DeliveryPolicyStore | None:
        return self.storage.policies

    @cached_property
    def cloud_data(self) -> CloudDataStore | None:
        return self.storage.cloud_data

    @cached_property
    def coalescer(self) -> CallCoalescer | None:
        return self.storage.coalescer

    def codec(self, user_id: str) -> UserCodec:
        """The user's ciphers (transport envelope, storage format); the same object for the same user while
        it stays in the process's small cache, so a request or record derives the key once."""
        return user_codec(self.secrets.master_key, user_id)

    @cached_property
    def tenant_registry(self) -> TenantStore | None:
        return self.storage.tenant_registry

    @cached_property
    def tenant_keys(self) -> TenantAccessor | None:
        return self.storage.tenant_keys

    @cached_property
    def tenants(self) -> TenantDirectory | None:
        return self.storage.tenants

    @cached_property
    def key_wrapper(self) -> KeyWrapper | None:
        return self.storage.key_wrapper

    @cached_property
    def tenant_purge(self) -> TenantPurge | None:
        return self.storage.tenant_purge

    def user_key(self, user_id: str) -> str:
        """The user key as hex (what ``GET /get-user-key`` returns)."""
        return self.codec(user_id).key_hex

    def now_ms(self) -> int:
        return self.clock.now_ms()
