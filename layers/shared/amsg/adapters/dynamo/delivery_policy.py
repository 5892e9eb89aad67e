"""The user's delivery policy (one encrypted item) and the frequency-cap counters.

A cap counter is one item per user, scope and fixed window: ``occ`` is the string set of the occurrences
(``<task uuid>@<occurrence ms>``) counted in that window, ``ttl`` its expiry a day after the window ends. It is
written only inside the send-claim transaction (:func:`cap_charge_action`), next to the outbox row claim and
the check that the task claim is still ours, so the count is exact under racing consumers and a run that lost
its claim counts nothing. Adding an occurrence that is already in the set is a no-op.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from amsg.adapters.dynamo import keys
from amsg.adapters.dynamo.table import DynamoTable
from amsg.ports import CapCharge, DeliveryPolicyRow

COUNTER_GRACE_S = 86_400  # counters outlive their window by a day (TTL deletion lags anyway)


def cap_charge_action(space: keys.KeySpace, user_id: str, charge: CapCharge) -> dict[str, Any]:
    """The transaction item that counts ``charge.occurrence`` unless the window is already full."""
    return {
        "Update": {
            "Key": space.cap_counter_key(user_id, charge.counter),
            "UpdateExpression": "ADD occ :o SET #ttl = :ttl",
            "ConditionExpression": "attribute_not_exists(occ) OR size(occ) < :max OR contains(occ, :k)",
            "ExpressionAttributeNames": {"#ttl": "ttl"},
            "ExpressionAttributeValues": {
                ":o": {charge.occurrence},
                ":k": charge.occurrence,
                ":max": charge.max,
                ":ttl": charge.window_end_ms // 1000 + COUNTER_GRACE_S,
            },
        }
    }


def policy_row(item: dict[str, Any] | None) -> DeliveryPolicyRow | None:
    """The stored policy of a policy item (also read in one batch with the task by run_task)."""
    if not item:
        return None
    return DeliveryPolicyRow(encrypted_policy=item["policy"], updated_at=int(item["updated_at"]))


class DynamoDeliveryPolicyStore:
    def __init__(self, table: DynamoTable, *, space: keys.KeySpace = keys.SINGLE) -> None:
        self.db = table
        self.space = space

    def get_policy(self, user_id: str) -> DeliveryPolicyRow | None:
        return policy_row(self.db.get(self.space.policy_key(user_id)))

    def put_policy(self, user_id: str, encrypted: str, updated_at: int) -> None:
        self.db.table.update_item(
            Key=self.space.policy_key(user_id),
            UpdateExpression="SET #p = :p, updated_at = :u",
            ExpressionAttributeNames={"#p": "policy"},
            ExpressionAttributeValues={":p": encrypted, ":u": updated_at},
        )

    def delete_policy(self, user_id: str) -> bool:
        result = self.db.table.delete_item(Key=self.space.policy_key(user_id), ReturnValues="ALL_OLD")
        return bool(result.get("Attributes"))

    def cap_room(self, user_id: str, charges: Sequence[CapCharge]) -> int | None:
        full: list[int] = []
        for charge in charges:
            item = self.db.get(self.space.cap_counter_key(user_id, charge.counter), projection="occ")
            counted = set((item or {}).get("occ") or ())
            if charge.occurrence not in counted and len(counted) >= charge.max:
                full.append(charge.window_end_ms)
        return max(full) if full else None
