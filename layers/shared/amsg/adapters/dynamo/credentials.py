"""LLM credentials per user (api.md §3.14, storage.md Part B, D.3)."""

from __future__ import annotations

from amsg.adapters.dynamo.table import DynamoTable


class DynamoCredentialStore:
    def __init__(self, table: DynamoTable) -> None:
        self.t = table
