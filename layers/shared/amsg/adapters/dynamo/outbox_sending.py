"""The outbox's send claims (see docs/delivery.md): take a row for pushing (fenced by the task's claim), hand it
back only for the claim that took it and only when its push surely did not leave, mark it unconfirmed (its push
left unanswered: never sent again) or delivered. Mixed into :class:`.outbox.DynamoOutboxStore`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from botocore.exceptions import ClientError

from amsg.adapters.dynamo import keys
from amsg.adapters.dynamo.delivery_policy import cap_charge_action
from amsg.adapters.dynamo.owners import guard_check, raise_if_guard_failed
from amsg.adapters.dynamo.single_writes import SingleWrite
from amsg.adapters.dynamo.table import DynamoTable, TransactionCancelled, is_conditional_failure
from amsg.adapters.dynamo.tenants import active_fence
from amsg.ports import CapCharge, CapReached, OwnerClaim
from amsg.ports.tenants import TenantInactive
from amsg.timeutil import iso_from_ms


def delivered_update(space: keys.KeySpace, user_id: str, message_id: str, at_ms: int) -> dict[str, Any]:
    """The ``Update`` that marks a pushed row delivered (the row must still exist: never recreate one)."""
    return {
        "Key": space.outbox_key(user_id, message_id),
        "UpdateExpression": "SET delivered_at = :t",
        "ConditionExpression": "attribute_exists(SK)",
        "ExpressionAttributeValues": {":t": at_ms},
    }


def delivered_marks(space: keys.KeySpace, user_id: str, message_ids: Sequence[str], at_ms: int) -> list[SingleWrite]:
    """The delivered marks of pushed rows, one conditional single write per distinct message id (sent together by
    ``DynamoTable.write_singles``, each with its own outcome)."""
    return [
        SingleWrite("update", delivered_update(space, user_id, message_id, at_ms))
        for message_id in _distinct(message_ids)
    ]


def claim_check(space: keys.KeySpace, user_id: str, task_uuid: str, claim_version: int, now_ms: int) -> dict[str, Any]:
    """The condition check of a write fenced by a run's task claim: pending under ``claim_version``, lease
    unexpired."""
    return {
        "ConditionCheck": {
            "Key": {"PK": space.user_pk(user_id), "SK": keys.task_sk(task_uuid)},
            "ConditionExpression": "claim_version = :cv AND #st = :pending AND lease_until > :now",
            "ExpressionAttributeNames": {"#st": "status"},
            "ExpressionAttributeValues": {":cv": claim_version, ":pending": "pending", ":now": iso_from_ms(now_ms)},
        }
    }


def _distinct(ids: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(i for i in ids if isinstance(i, str)))


class OutboxSendClaims:
    """The send-claim side of the outbox rows."""

    db: DynamoTable
    space: keys.KeySpace

    def claim_send(
        self,
        user_id: str,
        message_id: str,
        *,
        task_uuid: str,
        claim_version: int,
        now_ms: int,
        owner: OwnerClaim | None = None,
        caps: Sequence[CapCharge] = (),
        delivered: str | None = None,
    ) -> bool:
        actions = self._claim_actions(user_id, message_id, task_uuid, claim_version, now_ms)
        if owner is not None:  # an owned task's push is taken only while its owner holds
            actions.append(guard_check(self.space, user_id, owner.ref, owner.generation))
        fence = active_fence(self.space)
        if fence is not None:  # and a tenant's only while the tenant is active (no push once its deletion began)
            actions.append(fence)
        fence_at = len(actions) - 1 if fence is not None else None
        if delivered is not None:
            # the previous row of the batch went out: its delivered mark first, on its own (a fact about a push
            # that left; inside the claim's transaction it would bill twice: docs/decisions.md, 38)
            self.mark_delivered(user_id, [delivered], now_ms)
        first_cap = len(actions)
        actions += [cap_charge_action(self.space, user_id, charge) for charge in caps]
        try:
            self.db.transact(actions)
        except TransactionCancelled as cancelled:
            if fence_at is not None and cancelled.failed(fence_at):
                raise TenantInactive(self.space.tenant_id) from None
            if owner is not None:
                raise_if_guard_failed(cancelled, 2, 1)
            full = [caps[i - first_cap].window_end_ms for i in range(first_cap, len(actions)) if cancelled.failed(i)]
            if full and not any(cancelled.failed(i) for i in range(first_cap)):
                raise CapReached(max(full)) from None
            return False
        return True

    def _claim_actions(
        self, user_id: str, message_id: str, task_uuid: str, claim_version: int, now_ms: int
    ) -> list[dict[str, Any]]:
        return [
            {
                "Update": {
                    "Key": self.space.outbox_key(user_id, message_id),
                    "UpdateExpression": "SET sending_at = :t, sending_cv = :cv",
                    "ConditionExpression": "attribute_exists(SK) AND attribute_not_exists(sending_at) "
                    "AND attribute_not_exists(delivered_at) AND attribute_not_exists(acked_at)",
                    "ExpressionAttributeValues": {":t": now_ms, ":cv": claim_version},
                }
            },
            # our claim is current and its lease unexpired: a run that lost its lease sends nothing
            claim_check(self.space, user_id, task_uuid, claim_version, now_ms),
        ]

    def release_send(self, user_id: str, message_id: str, *, claim_version: int | None = None) -> None:
        condition = (
            "attribute_exists(SK) AND attribute_not_exists(delivered_at) AND attribute_not_exists(unconfirmed_at)"
        )
        values: dict[str, Any] = {}
        if claim_version is not None:  # only the send claim this task claim took (rows of older code lack it)
            condition += " AND (attribute_not_exists(sending_cv) OR sending_cv = :cv)"
            values[":cv"] = claim_version
        try:
            self.db.table.update_item(
                Key=self.space.outbox_key(user_id, message_id),
                UpdateExpression="REMOVE sending_at, sending_cv",
                ConditionExpression=condition,
                **({"ExpressionAttributeValues": values} if values else {}),
            )
        except ClientError as exc:
            if not is_conditional_failure(exc):
                raise

    def mark_unconfirmed(self, user_id: str, message_id: str, at_ms: int) -> bool:
        try:
            self.db.table.update_item(
                Key=self.space.outbox_key(user_id, message_id),
                UpdateExpression="SET unconfirmed_at = :t",
                ConditionExpression="attribute_exists(sending_at) AND attribute_not_exists(delivered_at)",
                ExpressionAttributeValues={":t": at_ms},
            )
        except ClientError as exc:
            if not is_conditional_failure(exc):
                raise
            return False
        return True

    def mark_delivered(self, user_id: str, message_ids: Sequence[str], at_ms: int) -> int:
        if isinstance(message_ids, str):
            message_ids = [message_ids]
        marks = delivered_marks(self.space, user_id, message_ids, at_ms)
        # one request for all (merged with the batch's siblings' in a coalescing session), each its own write
        outcomes = self.db.write_singles(marks) if marks else []
        return sum(1 for outcome in outcomes if outcome.checked().applied)
