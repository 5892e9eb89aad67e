"""LLM credentials per user (see docs/data-model.md).

Item ``U#<uid> / C#<credId>``: ``cred_id``, ``encrypted_value`` (storage ciphertext of the value JSON),
``created_at`` (first write, ISO), ``updated_at`` (every write, ISO), ``rev``. The credId is the last SK
component, so the base table already lists credentials in binary credId order and a prefix delete is
``begins_with(SK, "C#" + prefix)``.

The 500-rows-per-user cap is enforced by the API as the reference does it (check-then-write): a PUT batch stays ONE
all-or-nothing TransactWriteItems of ≤ 100 actions, which a counter item in the same transaction would push to 101
for a full batch. Concurrent PUTs by one user can overshoot the cap by at most one batch, exactly as on D1; there is
no counter to drift.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from amsg.adapters.dynamo import keys
from amsg.adapters.dynamo.owners import GuardSet, effective_owner, owner_condition, owner_sets, raise_if_guard_failed
from amsg.adapters.dynamo.table import DynamoTable, TransactionCancelled
from amsg.adapters.dynamo.tasks import stored_ms
from amsg.errors import CloudGuardError
from amsg.ports import CredentialWrite
from amsg.timeutil import iso_from_ms

MAX_BATCH = 100  # one transaction

# The store's `list` method (the CredentialStore port's name) shadows the built-in inside the class body, so the
# annotations there name the item list through this module-level alias.
Items = list[dict[str, Any]]


def _distinct(ids: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(i for i in ids if isinstance(i, str) and i))


class DynamoCredentialStore:
    def __init__(self, table: DynamoTable, *, space: keys.KeySpace = keys.SINGLE) -> None:
        self.db = table
        self.space = space

    # ---- writes -----------------------------------------------------------------------------------------

    def upsert(self, user_id: str, entries: Sequence[CredentialWrite], now_ms: int) -> int:
        """Overwrite values (``created_at`` kept, ``updated_at`` refreshed) in one transaction; returns the
        number of entries written. Duplicate credIds collapse to the last entry."""
        latest: dict[str, CredentialWrite] = {}
        for entry in entries:
            latest[entry.cred_id] = entry
        if not latest:
            return 0
        if len(latest) > MAX_BATCH:
            raise ValueError(f"at most {MAX_BATCH} credentials per upsert")
        stored = {
            str(item["cred_id"]): str(item["owner_ref"]) if item.get("owner_ref") else None
            for item in self._batch_get(user_id, list(latest), "cred_id, owner_ref")
        }
        guards = GuardSet(self.space)
        actions: list[dict[str, Any]] = []
        for entry in latest.values():
            stored_ref = stored.get(entry.cred_id)
            owner = effective_owner(entry.owner, entry.generation, stored_ref)
            if owner is not None:
                guards.add(owner.ref, owner.generation)
            condition, values = owner_condition(stored_ref)
            sets = "SET cred_id = :id, encrypted_value = :v, updated_at = :u, "
            sets += "created_at = if_not_exists(created_at, :u)"
            for name, value in owner_sets(owner).items():
                sets += f", {name} = :{name}"
                values[f":{name}"] = value
            values.update({":id": entry.cred_id, ":v": entry.encrypted_value, ":u": iso_from_ms(now_ms), ":one": 1})
            actions.append(
                {
                    "Update": {
                        "Key": self.space.credential_key(user_id, entry.cred_id),
                        "UpdateExpression": f"{sets} ADD rev :one",
                        # the recorded owner is still the one read (ownership never changes under a write)
                        "ConditionExpression": condition,
                        "ExpressionAttributeValues": values,
                    }
                }
            )
        if len(actions) + len(guards) > MAX_BATCH:
            raise CloudGuardError("CLOUD_GUARD_UNSUPPORTED", "一批凭据涉及的归属者过多，请分批写入")
        written = len(actions)
        actions += guards.actions(user_id)
        try:
            self.db.transact(actions)
        except TransactionCancelled as cancelled:
            raise_if_guard_failed(cancelled, written, len(guards))
            if "ConditionalCheckFailed" in cancelled.reasons:
                raise CloudGuardError("CLOUD_RESOURCE_CHANGED", "凭据的归属在写入期间被改变，请重试") from None
            raise
        return written

    def delete_ids(self, user_id: str, cred_ids: Sequence[str]) -> int:
        """Per-item deletes (idempotent, so a partially applied list is harmless); counts rows that existed."""
        deleted = 0
        for cred_id in _distinct(cred_ids):
            result = self.db.table.delete_item(Key=self.space.credential_key(user_id, cred_id), ReturnValues="ALL_OLD")
            if result.get("Attributes"):
                deleted += 1
        return deleted

    def delete_all(self, user_id: str) -> int:
        return self._delete_matching(user_id, "")

    def delete_prefix(self, user_id: str, prefix: str) -> int:
        """Plain prefix by code points (UTF-8 byte order equals code point order); an empty prefix deletes
        nothing (the API rejects it; ``delete_all`` is the explicit way)."""
        if not isinstance(prefix, str) or not prefix:
            return 0
        return self._delete_matching(user_id, prefix)

    def _delete_matching(self, user_id: str, prefix: str) -> int:
        """Not atomic beyond one batch: deletes are idempotent, a retry finishes the job."""
        rows = list(
            self.db.query_prefix(
                self.space.user_pk(user_id), keys.CREDENTIAL_PREFIX + prefix, ProjectionExpression="PK, SK"
            )
        )
        if rows:
            self.db.batch_delete({"PK": row["PK"], "SK": row["SK"]} for row in rows)
        return len(rows)

    # ---- reads ------------------------------------------------------------------------------------------

    def count(self, user_id: str) -> int:
        """Paginated COUNT (a page stops at 1 MB, and 500 large values need several)."""
        kwargs: dict[str, Any] = {
            "KeyConditionExpression": "PK = :pk AND begins_with(SK, :p)",
            "ExpressionAttributeValues": {":pk": self.space.user_pk(user_id), ":p": keys.CREDENTIAL_PREFIX},
            "ConsistentRead": True,
            "Select": "COUNT",
        }
        total = 0
        while True:
            page = self.db.table.query(**kwargs)
            total += int(page.get("Count", 0))
            last = page.get("LastEvaluatedKey")
            if not last:
                return total
            kwargs["ExclusiveStartKey"] = last

    def list(self, user_id: str) -> list[tuple[str, int | None]]:
        rows = self.db.query_prefix(
            self.space.user_pk(user_id), keys.CREDENTIAL_PREFIX, ProjectionExpression="cred_id, updated_at"
        )
        return [(str(row["cred_id"]), stored_ms(row.get("updated_at"))) for row in rows]

    def get_values(self, user_id: str, cred_ids: Sequence[str]) -> dict[str, str]:
        items = self._batch_get(user_id, cred_ids, "cred_id, encrypted_value")
        return {
            str(item["cred_id"]): item["encrypted_value"]
            for item in items
            if isinstance(item.get("encrypted_value"), str)
        }

    def existing_cred_ids(self, user_id: str, cred_ids: Sequence[str]) -> set[str]:
        return {str(item["cred_id"]) for item in self._batch_get(user_id, cred_ids, "cred_id")}

    def _batch_get(self, user_id: str, cred_ids: Sequence[str], projection: str) -> Items:
        """Consistent BatchGetItem, ≤ 100 keys per call, unprocessed keys retried. Read errors propagate."""
        wanted = _distinct(cred_ids)
        found: Items = []
        for start in range(0, len(wanted), 100):
            request: dict[str, Any] = {
                self.db.name: {
                    "Keys": [self.space.credential_key(user_id, cred_id) for cred_id in wanted[start : start + 100]],
                    "ConsistentRead": True,
                    "ProjectionExpression": projection,
                }
            }
            while request:
                response = self.db.resource.batch_get_item(RequestItems=request)
                found.extend(response.get("Responses", {}).get(self.db.name, []))
                request = response.get("UnprocessedKeys") or {}
        return found
