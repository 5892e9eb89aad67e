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
"""

from __future__ import annotations

import hashlib

SCHEMA_VERSION = "2.6.0-cloud-data.1+ddb.1"


USER_PREFIX = "U#"
TASK_PREFIX = "T#"
DUE_PREFIX = "DUE#"
DONE_PREFIX = "TDONE#"


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
