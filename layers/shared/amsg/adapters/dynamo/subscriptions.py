"""The user's Web Push subscription: one encrypted item per user, overwritten without comparison."""

from __future__ import annotations

from amsg.adapters.dynamo import keys
from amsg.adapters.dynamo.table import DynamoTable
from amsg.ports import PushSubscriptionRow


class DynamoPushSubscriptionStore:
    def __init__(self, table: DynamoTable) -> None:
        self.t = table

    def get_push_subscription(self, user_id: str) -> PushSubscriptionRow | None:
        item = self.t.get(keys.push_key(user_id))
        if not item:
            return None
        return PushSubscriptionRow(encrypted_subscription=item["subscription"], updated_at=int(item["updated_at"]))

    def put_push_subscription(self, user_id: str, encrypted: str, updated_at: int) -> None:
        self.t.table.update_item(
            Key=keys.push_key(user_id),
            UpdateExpression="SET subscription = :s, updated_at = :u ADD rev :one",
            ExpressionAttributeValues={":s": encrypted, ":u": updated_at, ":one": 1},
        )

    def delete_push_subscription(self, user_id: str) -> bool:
        result = self.t.table.delete_item(Key=keys.push_key(user_id), ReturnValues="ALL_OLD")
        return bool(result.get("Attributes"))
