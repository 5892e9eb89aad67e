"""The tenant registry in the stack's table: one item per tenant in one partition (docs/tenancy.md).

| item                   | PK                  | SK                  |
|------------------------|---------------------|---------------------|
| tenant                 | `TENANTS`           | `<tenantId>`        |
| request-rate window    | `N#<tenantId>#RATE` | `<epoch second>`    |

A rate window lies in the tenant's own namespace (it is the tenant's data: deleted with it) and expires by TTL
a minute after its second.

One partition keeps ``list`` a paged Query; each tenant's record is read once per sandbox and key-cache age, so
the partition's read rate is bounded by the number of warm sandboxes, not by requests. The item holds the
master key only wrapped by the stack's KMS key.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from amsg.adapters.dynamo.keys import KeySpace
from amsg.adapters.dynamo.table import DynamoTable, is_conditional_failure, item_int
from amsg.ports.tenants import ACTIVE, TenantExists, TenantNotFound, TenantPage, TenantRecord

REGISTRY_PK = "TENANTS"
RATE_WINDOW_TTL_S = 60


def tenant_key(tenant_id: str) -> dict[str, str]:
    return {"PK": REGISTRY_PK, "SK": tenant_id}


def active_fence(space: KeySpace) -> dict[str, Any] | None:
    """In a tenant's space, the transaction action that holds only while the tenant's record is active. Every
    push is taken in a transaction carrying it, so none goes out once a deletion (or a disable) has started,
    for one more item read and no extra request. None on the single line: its transactions are unchanged."""
    if space.tenant_id is None:
        return None
    return {
        "ConditionCheck": {
            "Key": tenant_key(space.tenant_id),
            "ConditionExpression": "#s = :active",
            "ExpressionAttributeNames": {"#s": "status"},
            "ExpressionAttributeValues": {":active": ACTIVE},
        }
    }


def tenant_record(item: dict[str, Any]) -> TenantRecord:
    return TenantRecord(
        tenant_id=str(item["SK"]),
        wrapped_master_key=str(item["wrapped_key"]),
        token_generation=item_int(item.get("token_generation")),
        status=str(item["status"]),
        created_at_ms=item_int(item.get("created_at")),
        updated_at_ms=item_int(item.get("updated_at")),
        tokens_not_before_s=item_int(item.get("tokens_not_before")),
        master_key_fingerprint=str(item.get("fingerprint", "")),
        rate_limit_rps=item_int(item.get("rate_limit_rps"), None),
    )


class DynamoTenantStore:
    def __init__(self, table: DynamoTable) -> None:
        self.db = table

    def create(self, record: TenantRecord) -> None:
        item = {
            **tenant_key(record.tenant_id),
            "wrapped_key": record.wrapped_master_key,
            "token_generation": record.token_generation,
            "status": record.status,
            "created_at": record.created_at_ms,
            "updated_at": record.updated_at_ms,
            "tokens_not_before": record.tokens_not_before_s,
            "fingerprint": record.master_key_fingerprint,
        }
        if record.rate_limit_rps is not None:
            item["rate_limit_rps"] = record.rate_limit_rps
        try:
            self.db.table.put_item(Item=item, ConditionExpression="attribute_not_exists(PK)")
        except ClientError as exc:
            if is_conditional_failure(exc):
                raise TenantExists(record.tenant_id) from None
            raise

    def get(self, tenant_id: str) -> TenantRecord | None:
        item = self.db.get(tenant_key(tenant_id))
        return tenant_record(item) if item else None

    def list_page(self, cursor: str | None = None, limit: int = 100) -> TenantPage:
        kwargs: dict[str, Any] = {
            "KeyConditionExpression": "PK = :pk",
            "ExpressionAttributeValues": {":pk": REGISTRY_PK},
            "ConsistentRead": True,
            "Limit": max(1, min(limit, 1000)),
        }
        if cursor:  # only a key of the registry's own partition: a cursor cannot point the query elsewhere
            kwargs["ExclusiveStartKey"] = {"PK": REGISTRY_PK, "SK": str(cursor)}
        page = self.db.table.query(**kwargs)
        last = page.get("LastEvaluatedKey")
        return TenantPage(
            records=[tenant_record(item) for item in page.get("Items", [])],
            cursor=str(last["SK"]) if last else None,
        )

    def set_status(self, tenant_id: str, status: str, now_ms: int) -> TenantRecord:
        return self._update(tenant_id, "SET #s = :s, updated_at = :now", {":s": status, ":now": now_ms})

    def rotate_tokens(self, tenant_id: str, not_before_s: int, now_ms: int) -> TenantRecord:
        return self._update(
            tenant_id,
            "SET tokens_not_before = :nb, updated_at = :now ADD token_generation :one",
            {":nb": not_before_s, ":now": now_ms, ":one": 1},
        )

    def set_rate_limit(self, tenant_id: str, rps: int | None, now_ms: int) -> TenantRecord:
        if rps is None:
            return self._update(tenant_id, "SET updated_at = :now REMOVE rate_limit_rps", {":now": now_ms})
        return self._update(tenant_id, "SET rate_limit_rps = :r, updated_at = :now", {":r": rps, ":now": now_ms})

    def count_request(self, tenant_id: str, second: int, limit: int) -> bool:
        try:
            self.db.table.update_item(
                Key={"PK": KeySpace(tenant_id).prefix + "RATE", "SK": str(second)},
                UpdateExpression="ADD n :one SET #ttl = if_not_exists(#ttl, :ttl)",
                ConditionExpression="attribute_not_exists(n) OR n < :limit",
                ExpressionAttributeNames={"#ttl": "ttl"},
                ExpressionAttributeValues={":one": 1, ":limit": limit, ":ttl": second + RATE_WINDOW_TTL_S},
            )
        except ClientError as exc:
            if is_conditional_failure(exc):
                return False
            raise
        return True

    def usage(self, tenant_id: str, due_shards: int) -> dict[str, int]:
        """Counted from the tenant's due and retention index partitions (``Select=COUNT``: no item is read out)."""
        space = KeySpace(tenant_id)
        pending = sum(self._count("due", "due_pk", space.due_shard_pk(s)) for s in range(due_shards))
        settled = sum(self._count("retention", "ret_pk", space.done_shard_pk(s)) for s in range(due_shards))
        return {"pendingTasks": pending, "settledTasks": settled}

    def _count(self, index: str, attribute: str, partition: str) -> int:
        kwargs: dict[str, Any] = {
            "IndexName": index,
            "KeyConditionExpression": "#part = :part",
            "ExpressionAttributeNames": {"#part": attribute},
            "ExpressionAttributeValues": {":part": partition},
            "Select": "COUNT",
        }
        total = 0
        while True:
            page = self.db.table.query(**kwargs)
            total += int(page.get("Count", 0))
            if not page.get("LastEvaluatedKey"):
                return total
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _update(self, tenant_id: str, expression: str, values: dict[str, Any]) -> TenantRecord:
        names = {"#s": "status"} if "#s" in expression else None
        kwargs: dict[str, Any] = {
            "Key": tenant_key(tenant_id),
            "UpdateExpression": expression,
            "ConditionExpression": "attribute_exists(PK)",
            "ExpressionAttributeValues": values,
            "ReturnValues": "ALL_NEW",
        }
        if names:
            kwargs["ExpressionAttributeNames"] = names
        try:
            return tenant_record(self.db.table.update_item(**kwargs)["Attributes"])
        except ClientError as exc:
            if is_conditional_failure(exc):
                raise TenantNotFound(tenant_id) from None
            raise
