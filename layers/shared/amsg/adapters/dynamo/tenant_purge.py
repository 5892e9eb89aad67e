"""A tenant's deletion in the stack's table: passes of a filtered Scan over the tenant's namespace, one page per
step, the cursor kept in a deletion record so any tick resumes it (docs/tenancy-data.md).

| item              | PK             | SK           |
|-------------------|----------------|--------------|
| deletion progress | `TENANT_PURGE` | `<tenantId>` |

A Scan is the one way to find every item of a namespace without a per-tenant index (users' partitions are not
listed anywhere); it reads the whole table once per pass, which is acceptable for a rare operator action and is
bounded per step. Steps are idempotent: two ticks advancing one deletion delete the same keys twice at worst.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from amsg import jsonio
from amsg.adapters.dynamo.keys import tenant_space
from amsg.adapters.dynamo.table import DynamoTable, is_conditional_failure, item_int
from amsg.adapters.dynamo.tenants import tenant_key
from amsg.ports.tenant_purge import PurgeProgress, PurgeStatus

PURGE_PK = "TENANT_PURGE"
SCAN_PAGE = 1_000  # items evaluated per step (one Scan request, then batch deletes of what matched)


class DynamoTenantPurge:
    def __init__(self, table: DynamoTable) -> None:
        self.db = table

    def start(self, tenant_id: str, now_ms: int) -> None:
        self.db.table.update_item(
            Key={"PK": PURGE_PK, "SK": tenant_id},
            UpdateExpression="SET started_at = if_not_exists(started_at, :now), "
            "pass_started_at = if_not_exists(pass_started_at, :now), deleted = if_not_exists(deleted, :zero), "
            "pass_deleted = if_not_exists(pass_deleted, :zero)",
            ExpressionAttributeValues={":now": now_ms, ":zero": 0},
        )

    def pending(self) -> list[str]:
        return [
            str(item["SK"])
            for item in self.db.query_all(
                KeyConditionExpression="PK = :pk",
                ExpressionAttributeValues={":pk": PURGE_PK},
                ProjectionExpression="SK",
            )
        ]

    def status(self, tenant_id: str) -> PurgeStatus | None:
        record = self.db.get({"PK": PURGE_PK, "SK": tenant_id})
        if record is None:
            return None
        return PurgeStatus(
            tenant_id,
            item_int(record.get("started_at")),
            item_int(record.get("deleted")),
            bool(record.get("clean_pass")) and not record.get("scan_cursor"),
        )

    def step(self, tenant_id: str, now_ms: int, *, grace_ms: int) -> PurgeProgress:
        record = self.db.get({"PK": PURGE_PK, "SK": tenant_id})
        if record is None:
            return PurgeProgress(tenant_id, 0, True)
        started = item_int(record.get("started_at"))
        cursor = record.get("scan_cursor")
        if not cursor and record.get("clean_pass") and now_ms < started + grace_ms:
            return PurgeProgress(tenant_id, 0, False, waiting=True)  # a clean pass done: running deliveries end
        kwargs: dict[str, Any] = {
            "FilterExpression": "begins_with(PK, :prefix)",
            "ExpressionAttributeValues": {":prefix": tenant_space(tenant_id).prefix},
            "ProjectionExpression": "PK, SK",
            "Limit": SCAN_PAGE,
        }
        if cursor:
            kwargs["ExclusiveStartKey"] = jsonio.loads(str(cursor))
        page = self.db.table.scan(**kwargs)
        doomed = [{"PK": item["PK"], "SK": item["SK"]} for item in page.get("Items", [])]
        if doomed:
            self.db.batch_delete(doomed)
        pass_deleted = (item_int(record.get("pass_deleted")) if cursor else 0) + len(doomed)
        pass_started = item_int(record.get("pass_started_at")) if cursor else now_ms
        if page.get("LastEvaluatedKey"):
            self._save(
                tenant_id,
                len(doomed),
                cursor=jsonio.dumps(page["LastEvaluatedKey"]),
                pass_deleted=pass_deleted,
                pass_started_at=pass_started,
                clean_pass=False,
            )
            return PurgeProgress(tenant_id, len(doomed), False)
        if pass_deleted == 0 and pass_started >= started + grace_ms:
            self.db.batch_delete([tenant_key(tenant_id), {"PK": PURGE_PK, "SK": tenant_id}])
            return PurgeProgress(tenant_id, len(doomed), True)
        self._save(
            tenant_id,
            len(doomed),
            cursor=None,
            pass_deleted=0,
            pass_started_at=pass_started,
            clean_pass=pass_deleted == 0,
        )
        return PurgeProgress(tenant_id, len(doomed), False)

    def _save(self, tenant_id: str, deleted: int, *, cursor: str | None, **fields: Any) -> None:
        names = sorted(fields)
        sets = ["deleted = deleted + :d", *(f"{name} = :{name}" for name in names)]
        values: dict[str, Any] = {":d": deleted, **{f":{name}": fields[name] for name in names}}
        if cursor is not None:
            sets.append("scan_cursor = :c")
            values[":c"] = cursor
        update = "SET " + ", ".join(sets) + ("" if cursor is not None else " REMOVE scan_cursor")
        try:
            self.db.table.update_item(
                Key={"PK": PURGE_PK, "SK": tenant_id},
                UpdateExpression=update,
                ConditionExpression="attribute_exists(PK)",
                ExpressionAttributeValues=values,
            )
        except ClientError as exc:
            if not is_conditional_failure(exc):  # else another step finished the deletion meanwhile
                raise
