"""Key layout of the single table. Everything of one user lives in partition ``U#<userId>``.

| item                 | PK            | SK                                   |
|----------------------|---------------|--------------------------------------|
| task                 | U#<uid>       | T#<uuid>                             |
| task payload part    | U#<uid>       | TP#<uuid>#<token>#<index:05d>        |
| task uuid registry   | TU#<uuid>     | #                                    |
| per-user counters    | U#<uid>       | SEQ#task, SEQ#outbox                 |
| push subscription    | U#<uid>       | PUSH                                 |
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
