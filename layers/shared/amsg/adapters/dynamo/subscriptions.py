"""The user's Web Push subscription: one encrypted item per user, overwritten without comparison."""

from __future__ import annotations

from botocore.exceptions import ClientError

from amsg.adapters.dynamo import keys
from amsg.adapters.dynamo.table import DynamoTable, is_conditional_failure
from amsg.ports import PushSubscriptionRow


def subscription_row(item: dict | None) -> PushSubscriptionRow | None:
    """The stored subscription of a ``PUSH`` item (also read in batches with a task or a counter)."""
    if not item or not item.get("subscription"):
        return None
    return PushSubscriptionRow(
        encrypted_subscription=item["subscription"],
        updated_at=int(item.get("updated_at", 0)),
        gone=item.get("gone_at") is not None,
    )


class DynamoPushSubscriptionStore:
    def __init__(self, table: DynamoTable, *, space: keys.KeySpace = keys.SINGLE) -> None:
        self.t = table
        self.keys = space

    def get_push_subscription(self, user_id: str) -> PushSubscriptionRow | None:
        return subscription_row(self.t.get(self.keys.push_key(user_id)))

    def put_push_subscription(self, user_id: str, encrypted: str, updated_at: int) -> None:
        self.t.table.update_item(
            Key=self.keys.push_key(user_id),
            UpdateExpression="SET subscription = :s, updated_at = :u REMOVE gone_at ADD rev :one",
            ExpressionAttributeValues={":s": encrypted, ":u": updated_at, ":one": 1},
        )

    def delete_push_subscription(self, user_id: str) -> bool:
        result = self.t.table.delete_item(Key=self.keys.push_key(user_id), ReturnValues="ALL_OLD")
        return bool(result.get("Attributes"))

    def mark_push_subscription_gone(self, user_id: str, encrypted: str, at_ms: int) -> bool:
        try:
            self.t.table.update_item(
                Key=self.keys.push_key(user_id),
                UpdateExpression="SET gone_at = :t",
                ConditionExpression="subscription = :s",  # the very subscription pushed to (a fresh IV per PUT)
                ExpressionAttributeValues={":t": at_ms, ":s": encrypted},
            )
        except ClientError as exc:
            if is_conditional_failure(exc):
                return False
            raise
        return True
