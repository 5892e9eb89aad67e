"""What an API or engine function is handed: settings, lazily resolved secrets, the clock and the ports."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from amsg.config import Secrets, Settings
from amsg.crypto import derive_user_key
from amsg.ports import ClaimStore, Clock, OutboxStore, PushSubscriptionStore, SchemaInspector, TaskStore


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
    credentials: Any = None  # amsg.adapters.dynamo.credentials.DynamoCredentialStore (issue: client data)
    client_state: Any = None  # amsg.adapters.dynamo.client_state.DynamoClientStateStore
    # heavy collaborators built on first use (push sender, LLM client, instant delivery), so API
    # functions that never need them never import them
    extras: dict[str, Callable[[], Any]] = field(default_factory=dict)
    _built: dict[str, Any] = field(default_factory=dict, repr=False)

    def user_key(self, user_id: str) -> str:
        return derive_user_key(self.secrets.master_key, user_id)

    def now_ms(self) -> int:
        return self.clock.now_ms()

    def extra(self, name: str) -> Any:
        """A lazily built collaborator (e.g. the push sender, which API routes must not import eagerly)."""
        if name not in self._built:
            factory = self.extras.get(name)
            if factory is None:
                return None
            if getattr(factory, "uncached", False):  # the factory keeps (and refreshes) its own instance
                return factory()
            self._built[name] = factory()
        return self._built[name]
