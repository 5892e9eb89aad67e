"""What an API or engine function is handed: settings, lazily resolved secrets, the clock and the ports."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from amsg.config import Secrets, Settings
from amsg.crypto import derive_user_key
from amsg.ports import (
    CallCoalescer,
    ClaimStore,
    ClientStateStore,
    Clock,
    CloudDataStore,
    CredentialStore,
    DeliveryPolicyStore,
    LlmClient,
    OutboxStore,
    OwnerStore,
    PushSender,
    PushSubscriptionStore,
    SchemaInspector,
    TaskQueue,
    TaskStore,
)


@dataclass
class DeliveryPorts:
    """The delivery engine's collaborators, each built on first use: API routes that never deliver never import
    the push or LLM stack. ``push_sender`` is None while VAPID is incomplete (the tick then claims nothing) and
    ``queue`` is None without a queue URL."""

    make_push_sender: Callable[[], PushSender | None]
    make_llm: Callable[[], LlmClient]
    make_queue: Callable[[], TaskQueue | None]
    describe_push_problem: Callable[[], str | None] = lambda: None
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


@dataclass
class AppContext:
    settings: Settings
    secrets: Secrets
    clock: Clock
    tasks: TaskStore
    claims: ClaimStore
    subscriptions: PushSubscriptionStore
    outbox: OutboxStore
    schema: SchemaInspector
    credentials: CredentialStore
    client_state: ClientStateStore
    delivery: DeliveryPorts
    owners: OwnerStore | None = None  # cloud-data owners and their guards
    policies: DeliveryPolicyStore | None = None  # quiet hours and frequency caps (None: no policy applies)
    cloud_data: CloudDataStore | None = None  # the /cloud-data inventory and its records
    coalescer: CallCoalescer | None = None  # a batch's concurrent records share storage round trips

    def user_key(self, user_id: str) -> str:
        return derive_user_key(self.secrets.master_key, user_id)

    def now_ms(self) -> int:
        return self.clock.now_ms()
