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
| serialize-group lock | SG#<group>    | #                                    |
| schema marker        | META          | schema                               |
"""

from __future__ import annotations

import hashlib

SCHEMA_VERSION = "2.6.0-cloud-data.1+ddb.1"


def user_pk(user_id: str) -> str:
    return f"U#{user_id}"


def task_sk(uuid: str) -> str:
    return f"T#{uuid}"


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


def group_lock_key(group: str) -> dict[str, str]:
    return {"PK": f"SG#{group}", "SK": "#"}


SCHEMA_KEY = {"PK": "META", "SK": "schema"}


def due_shard(uuid: str, shard_count: int) -> int:
    """Stable shard of a task in the sparse due index (first 8 hex of sha256(uuid) mod N)."""
    return int(hashlib.sha256(uuid.encode("utf-8")).hexdigest()[:8], 16) % max(1, shard_count)


def due_pk(uuid: str, shard_count: int) -> str:
    return f"DUE#{due_shard(uuid, shard_count)}"


def due_sk(next_send_at: str, uuid: str) -> str:
    return f"{next_send_at}#{uuid}"


def done_pk(uuid: str, shard_count: int) -> str:
    return f"TDONE#{due_shard(uuid, shard_count)}"
