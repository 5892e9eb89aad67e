"""Schema self-check for ``POST /init-tenant``: the template owns the table, so verify, never create, then
record the marker."""

from __future__ import annotations

from botocore.exceptions import ClientError

from amsg.adapters.dynamo import keys
from amsg.adapters.dynamo.table import DynamoTable
from amsg.ports import SchemaItem, SchemaReport

REQUIRED_INDEXES: dict[str, tuple[str, str]] = {
    # name: (kind, what it serves)
    "due": ("gsi", "sparse sharded due-task index read by the tick"),
    "retention": ("gsi", "cleanup of settled tasks and expired client state"),
    "work": ("gsi", "due cloud-data cleanup operations"),
    "outbox_unacked": ("lsi", "unacked outbox rows in id order (GET /outbox)"),
    "outbox_by_task": ("lsi", "outbox rows of one task (cancel / redelivery)"),
}


class DynamoSchemaInspector:
    def __init__(self, table: DynamoTable) -> None:
        self.db = table

    def check_schema(self, now_ms: int) -> SchemaReport:
        client = self.db.client
        items: list[SchemaItem] = []
        missing: list[str] = []
        try:
            description = client.describe_table(TableName=self.db.name)["Table"]
        except ClientError as exc:
            # our own words only: the SDK's message would end up in the 500 body
            not_found = exc.response.get("Error", {}).get("Code") == "ResourceNotFoundException"
            error = "table does not exist" if not_found else "table cannot be described"
            return SchemaReport(ok=False, items=[], missing=[f"table:{self.db.name}"], error=error)
        present: dict[str, str] = {}
        for index in description.get("GlobalSecondaryIndexes", []):
            present[index["IndexName"]] = index.get("IndexStatus", "ACTIVE")
        for index in description.get("LocalSecondaryIndexes", []):
            present[index["IndexName"]] = "ACTIVE"
        for name, (kind, purpose) in REQUIRED_INDEXES.items():
            status = present.get(name)
            entry: SchemaItem = {"name": name, "description": f"{kind}: {purpose}", "critical": True, "status": ""}
            if status == "ACTIVE":
                entry["status"] = "success"
            else:
                entry["status"] = "failed"
                entry["error"] = "missing" if status is None else f"index status {status}"
                missing.append(f"index:{name}")
            items.append(entry)
        ttl = client.describe_time_to_live(TableName=self.db.name).get("TimeToLiveDescription", {})
        ttl_ok = ttl.get("AttributeName") == "ttl" and ttl.get("TimeToLiveStatus") in ("ENABLED", "ENABLING")
        ttl_item: SchemaItem = {
            "name": "ttl",
            "status": "success" if ttl_ok else "failed",
            "description": "ttl attribute (epoch seconds) expires outbox rows and cloud records",
            "critical": False,
        }
        if not ttl_ok:
            ttl_item["error"] = "TTL is not enabled on attribute ttl"
        items.append(ttl_item)
        if not missing:
            self.db.table.put_item(Item={**keys.SCHEMA_KEY, "version": keys.SCHEMA_VERSION, "updated_at": now_ms})
        return SchemaReport(ok=not missing, items=items, missing=missing)
