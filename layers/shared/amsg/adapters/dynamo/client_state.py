"""client_state: the per-user cloud mirror of client state (api.md §3.11-§3.12, engine.md §7, D.4.7)."""

from __future__ import annotations

from amsg.adapters.dynamo.table import DynamoTable


class DynamoClientStateStore:
    def __init__(self, table: DynamoTable) -> None:
        self.t = table
