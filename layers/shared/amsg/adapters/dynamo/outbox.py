"""The per-user message outbox (engine.md §8, storage.md D.4.8, R7).

Item: ``U#<uid> / O#<message_id>`` with a per-user integer ``id``; ``ob_lsk`` (zero-padded id) exists only
while unacked (LSI ``outbox_unacked``); ``obt_lsk`` = ``<task_uuid>#<created 13d>#<id 16d>`` (LSI
``outbox_by_task``).
"""

from __future__ import annotations

from boto3.dynamodb.conditions import Key
from botocore.exceptions import ClientError

from amsg.adapters.dynamo import keys
from amsg.adapters.dynamo.table import DynamoTable, is_conditional_failure


class DynamoOutboxStore:
    def __init__(self, table: DynamoTable) -> None:
        self.t = table

    def discard_undelivered_for_task(self, user_id: str, task_uuid: str) -> int:
        """Delete the task's rows nobody has received yet (never delivered, never acked)."""
        pk = keys.user_pk(user_id)
        rows = self.t.query_all(
            IndexName="outbox_by_task",
            KeyConditionExpression=Key("PK").eq(pk) & Key("obt_lsk").begins_with(f"{task_uuid}#"),
            ConsistentRead=True,
            ProjectionExpression="PK, SK",
        )
        deleted = 0
        for row in rows:
            try:
                self.t.table.delete_item(
                    Key={"PK": row["PK"], "SK": row["SK"]},
                    ConditionExpression="attribute_not_exists(delivered_at) AND attribute_not_exists(acked_at)",
                )
                deleted += 1
            except ClientError as exc:
                if not is_conditional_failure(exc):
                    raise
        return deleted
