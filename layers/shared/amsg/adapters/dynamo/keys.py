"""Key layout of the single table. Everything of one user lives in partition ``U#<userId>``.

| item                 | PK            | SK                                   |
|----------------------|---------------|--------------------------------------|
| task                 | U#<uid>       | T#<uuid>                             |
| task payload part    | U#<uid>       | TP#<uuid>#<token>#<index:05d>        |
| task uuid registry   | TU#<uuid>     | #                                    |
| per-user counters    | U#<uid>       | SEQ#task, SEQ#outbox                 |
| push subscription    | U#<uid>       | PUSH                                 |
| outbox row           | U#<uid>       | O#<message_id or U+001E sha256>      |
| outbox payload part  | U#<uid>       | OP#<sha256(message_id)>#<token>#<i>  |
| LLM credential       | U#<uid>       | C#<credId>                           |
| client state root    | U#<uid>       | S#<ns>\\x1f<keyPart>  (client_state.py) |
| client state part    | U#<uid>       | SC#<ns>\\x1f<keyPart>\\x1f<token>#<i>    |
| serialize-group lock | U#<uid>       | SG#<hmac of the group key>           |
| delivery policy      | U#<uid>       | POLICY                               |
| frequency-cap counter| U#<uid>       | CAP#<scope>#<window minutes>#<start> |
| schema marker        | META          | schema                               |

Index keys written on task items: GSI ``due`` — ``due_pk = DUE#<shard>``, ``due_sk = <eligible time>#<uuid>``
(pending tasks only); GSI ``retention`` — ``ret_pk = TDONE#<shard>``, ``ret_sk = <settled time>`` (sent/failed).
Every prefix and every parse of a key lives in this module.

Tenants (docs/tenancy-data.md, docs/data-model.md): every partition key and every index partition key is built by a
:class:`KeySpace`. The single-user line's space has no namespace and yields exactly the keys above; a tenant's
space prefixes each of them with ``N#<tenantId>#`` (``N#<t>#U#<uid>``, ``N#<t>#TU#<uuid>``, ``N#<t>#DUE#<shard>``,
``N#<t>#TDONE#<shard>``, ``N#<t>#WORK#<kind>``, ``N#<t>#STNS#<ns>``; a tenant's pending-task counter is
``N#<t>#PENDING``), so no query of one tenant's space can
name another tenant's partition. Sort keys are the same in both. The DynamoDB adapters take their space when
they are built and never receive a partition key from outside.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from amsg.tenancy.ids import valid_tenant_id

SCHEMA_VERSION = "2.6.0-cloud-data.1+ddb.1"


USER_PREFIX = "U#"
TASK_PREFIX = "T#"
DUE_PREFIX = "DUE#"
DONE_PREFIX = "TDONE#"
TENANT_PREFIX = "N#"
WORK_PREFIX = "WORK#"
STATE_RETENTION_PREFIX = "STNS#"
PENDING_COUNTER_PK = "PENDING"


def user_pk(user_id: str) -> str:
    return f"{USER_PREFIX}{user_id}"


def task_sk(uuid: str) -> str:
    return f"{TASK_PREFIX}{uuid}"


def task_key(user_id: str, uuid: str) -> dict[str, str]:
    return {"PK": user_pk(user_id), "SK": task_sk(uuid)}


def parse_task_key(item: dict[str, str]) -> tuple[str, str]:
    """(user id, task uuid) of a task item's key (e.g. from an index that projects only the keys)."""
    pk, sk = item["PK"], item["SK"]
    if not pk.startswith(USER_PREFIX) or not sk.startswith(TASK_PREFIX):
        raise ValueError("not a task key")
    return pk[len(USER_PREFIX) :], sk[len(TASK_PREFIX) :]


def task_part_prefix(uuid: str) -> str:
    return f"TP#{uuid}#"


def uuid_registry_key(uuid: str) -> dict[str, str]:
    return {"PK": f"TU#{uuid}", "SK": "#"}


def counter_key(user_id: str, name: str) -> dict[str, str]:
    return {"PK": user_pk(user_id), "SK": f"SEQ#{name}"}


def push_key(user_id: str) -> dict[str, str]:
    return {"PK": user_pk(user_id), "SK": "PUSH"}


OUTBOX_PREFIX = "O#"
OUTBOX_PART_PREFIX = "OP#"
# SK ≤ 1024 bytes: longer message ids (and any id that could be mistaken for a hashed one) are hashed.
OUTBOX_MAX_RAW_ID_BYTES = 1000
HASHED_MARK = "\x1e"


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()


def outbox_key(user_id: str, message_id: str) -> dict[str, str]:
    raw = message_id.encode("utf-8", errors="surrogatepass")
    part = message_id
    if len(raw) > OUTBOX_MAX_RAW_ID_BYTES or message_id.startswith(HASHED_MARK):
        part = HASHED_MARK + sha256_hex(message_id)
    return {"PK": user_pk(user_id), "SK": OUTBOX_PREFIX + part}


def outbox_part_prefix(message_id: str) -> str:
    return f"{OUTBOX_PART_PREFIX}{sha256_hex(message_id)}#"


CREDENTIAL_PREFIX = "C#"


def credential_key(user_id: str, cred_id: str) -> dict[str, str]:
    """credId is the last SK component, so ``begins_with(SK, "C#" + prefix)`` is the prefix delete."""
    return {"PK": user_pk(user_id), "SK": CREDENTIAL_PREFIX + cred_id}


def group_lock_key(user_id: str, group: str) -> dict[str, str]:
    """The serialize-group lock of one user's group (``group`` is already an HMAC, never the host's key)."""
    return {"PK": user_pk(user_id), "SK": f"SG#{group}"}


def policy_key(user_id: str) -> dict[str, str]:
    return {"PK": user_pk(user_id), "SK": "POLICY"}


def cap_counter_key(user_id: str, counter: str) -> dict[str, str]:
    """One user's counter of one cap scope and fixed window (``counter`` built by the engine)."""
    return {"PK": user_pk(user_id), "SK": f"CAP#{counter}"}


SCHEMA_KEY = {"PK": "META", "SK": "schema"}


def due_shard(uuid: str, shard_count: int) -> int:
    """Stable shard of a task in the sparse due index (first 8 hex of sha256(uuid) mod N)."""
    return int(hashlib.sha256(uuid.encode("utf-8")).hexdigest()[:8], 16) % max(1, shard_count)


def due_shard_pk(shard: int) -> str:
    return f"{DUE_PREFIX}{shard}"


def due_pk(uuid: str, shard_count: int) -> str:
    return due_shard_pk(due_shard(uuid, shard_count))


def due_sk(next_send_at: str, uuid: str) -> str:
    return f"{next_send_at}#{uuid}"


def due_window_end(now_iso: str) -> str:
    """Upper bound of the due index's sort key for "eligible at or before now" (every uuid sorts below)."""
    return f"{now_iso}#\uffff"


def done_shard_pk(shard: int) -> str:
    return f"{DONE_PREFIX}{shard}"


def done_pk(uuid: str, shard_count: int) -> str:
    return done_shard_pk(due_shard(uuid, shard_count))


def work_pk(kind: str) -> str:
    """Partition of the ``work`` index for one kind of background work (cloud-data cleanup operations)."""
    return f"{WORK_PREFIX}{kind}"


def state_retention_pk(namespace: str) -> str:
    """Partition of the ``retention`` index for one client-state namespace (TTL sweeps)."""
    return f"{STATE_RETENTION_PREFIX}{namespace}"


@dataclass(frozen=True)
class KeySpace:
    """Every partition key of one namespace: the single-user line's (``tenant_id`` None, today's keys
    byte for byte) or one tenant's (each partition key prefixed with ``N#<tenantId>#``). Parsing is against
    the space's own prefix."""

    tenant_id: str | None = None
    prefix: str = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.tenant_id is not None and not valid_tenant_id(self.tenant_id):
            raise ValueError("invalid tenant id")
        object.__setattr__(self, "prefix", "" if self.tenant_id is None else f"{TENANT_PREFIX}{self.tenant_id}#")

    def owns(self, partition_key: str) -> bool:
        """Whether a partition key (table or index) lies in this space; the single space owns no tenant's key."""
        if self.tenant_id is None:
            return not partition_key.startswith(TENANT_PREFIX)
        return partition_key.startswith(self.prefix)

    def user_pk(self, user_id: str) -> str:
        return self.prefix + user_pk(user_id)

    def user_of(self, partition_key: str) -> str:
        """The user id of a user partition key of this space (ValueError for any other key)."""
        head = self.prefix + USER_PREFIX
        if not partition_key.startswith(head):
            raise ValueError("not a user partition of this key space")
        return partition_key[len(head) :]

    def task_key(self, user_id: str, uuid: str) -> dict[str, str]:
        return {"PK": self.user_pk(user_id), "SK": task_sk(uuid)}

    def parse_task_key(self, item: dict[str, str]) -> tuple[str, str]:
        """(user id, task uuid) of a task item's key of this space (e.g. from a keys-only index)."""
        sk = item["SK"]
        if not sk.startswith(TASK_PREFIX):
            raise ValueError("not a task key")
        return self.user_of(item["PK"]), sk[len(TASK_PREFIX) :]

    def uuid_registry_key(self, uuid: str) -> dict[str, str]:
        key = uuid_registry_key(uuid)
        return {"PK": self.prefix + key["PK"], "SK": key["SK"]}

    def _user_item(self, key: dict[str, str]) -> dict[str, str]:
        return {"PK": self.prefix + key["PK"], "SK": key["SK"]}

    def counter_key(self, user_id: str, name: str) -> dict[str, str]:
        return self._user_item(counter_key(user_id, name))

    def push_key(self, user_id: str) -> dict[str, str]:
        return self._user_item(push_key(user_id))

    def outbox_key(self, user_id: str, message_id: str) -> dict[str, str]:
        return self._user_item(outbox_key(user_id, message_id))

    def credential_key(self, user_id: str, cred_id: str) -> dict[str, str]:
        return self._user_item(credential_key(user_id, cred_id))

    def group_lock_key(self, user_id: str, group: str) -> dict[str, str]:
        return self._user_item(group_lock_key(user_id, group))

    def policy_key(self, user_id: str) -> dict[str, str]:
        return self._user_item(policy_key(user_id))

    def cap_counter_key(self, user_id: str, counter: str) -> dict[str, str]:
        return self._user_item(cap_counter_key(user_id, counter))

    def due_shard_pk(self, shard: int) -> str:
        return self.prefix + due_shard_pk(shard)

    def due_pk(self, uuid: str, shard_count: int) -> str:
        return self.prefix + due_pk(uuid, shard_count)

    def done_shard_pk(self, shard: int) -> str:
        return self.prefix + done_shard_pk(shard)

    def done_pk(self, uuid: str, shard_count: int) -> str:
        return self.prefix + done_pk(uuid, shard_count)

    def work_pk(self, kind: str) -> str:
        return self.prefix + work_pk(kind)

    def state_retention_pk(self, namespace: str) -> str:
        return self.prefix + state_retention_pk(namespace)

    def pending_counter_key(self) -> dict[str, str]:
        """The tenant's count of pending tasks (docs/tenancy.md, limits); the single line keeps none."""
        return {"PK": self.prefix + PENDING_COUNTER_PK, "SK": "#"}


SINGLE = KeySpace()
"""The single-user line's space: no namespace, the keys of the table above."""


def tenant_space(tenant_id: str) -> KeySpace:
    return KeySpace(tenant_id)
