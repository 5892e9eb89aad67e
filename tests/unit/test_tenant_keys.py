"""The key spaces: the single line's keys are today's, byte for byte; a tenant's are all under its namespace."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from amsg.adapters.dynamo import keys
from amsg.adapters.dynamo.keys import SINGLE, KeySpace, tenant_space
from hypothesis import given
from hypothesis import strategies as st

ids = st.text(min_size=1, max_size=40)
tenants = st.from_regex(r"[A-Za-z0-9_.-]{1,40}", fullmatch=True)
PARTITION_FUNCTIONS = {
    "user_pk",
    "task_key",
    "parse_task_key",
    "uuid_registry_key",
    "counter_key",
    "push_key",
    "outbox_key",
    "credential_key",
    "group_lock_key",
    "policy_key",
    "cap_counter_key",
    "due_shard_pk",
    "due_pk",
    "done_shard_pk",
    "done_pk",
    "work_pk",
    "state_retention_pk",
}


def _every_key(space: KeySpace, uid: str, other: str) -> list[str]:
    """Every partition key (table and index) a space builds for one user and one id."""
    items = [
        space.task_key(uid, other),
        space.uuid_registry_key(other),
        space.counter_key(uid, "task"),
        space.push_key(uid),
        space.outbox_key(uid, other),
        space.credential_key(uid, other),
        space.group_lock_key(uid, other),
        space.policy_key(uid),
        space.cap_counter_key(uid, other),
    ]
    return [item["PK"] for item in items] + [
        space.user_pk(uid),
        space.due_shard_pk(3),
        space.due_pk(other, 8),
        space.done_shard_pk(2),
        space.done_pk(other, 8),
        space.work_pk("operation"),
        space.state_retention_pk(other),
    ]


def test_single_space_yields_exactly_the_existing_literal_keys() -> None:
    """Pinned literals: data written before tenancy existed stays addressable."""
    assert SINGLE.task_key("u1", "abc") == {"PK": "U#u1", "SK": "T#abc"}
    assert SINGLE.uuid_registry_key("abc") == {"PK": "TU#abc", "SK": "#"}
    assert SINGLE.counter_key("u1", "outbox") == {"PK": "U#u1", "SK": "SEQ#outbox"}
    assert SINGLE.push_key("u1") == {"PK": "U#u1", "SK": "PUSH"}
    assert SINGLE.outbox_key("u1", "m1") == {"PK": "U#u1", "SK": "O#m1"}
    assert SINGLE.credential_key("u1", "c") == {"PK": "U#u1", "SK": "C#c"}
    assert SINGLE.policy_key("u1") == {"PK": "U#u1", "SK": "POLICY"}
    assert SINGLE.due_shard_pk(0) == "DUE#0"
    assert SINGLE.done_shard_pk(1) == "TDONE#1"
    assert SINGLE.work_pk("operation") == "WORK#operation"
    assert SINGLE.state_retention_pk("ns") == "STNS#ns"


@given(uid=ids, other=ids)
def test_single_space_matches_the_module_layout(uid: str, other: str) -> None:
    assert SINGLE.task_key(uid, other) == keys.task_key(uid, other)
    assert SINGLE.uuid_registry_key(other) == keys.uuid_registry_key(other)
    assert SINGLE.outbox_key(uid, other) == keys.outbox_key(uid, other)
    assert SINGLE.cap_counter_key(uid, other) == keys.cap_counter_key(uid, other)
    assert SINGLE.due_pk(other, 8) == keys.due_pk(other, 8)
    assert SINGLE.done_pk(other, 8) == keys.done_pk(other, 8)
    assert SINGLE.parse_task_key(keys.task_key(uid, other)) == (uid, other)
    assert all(SINGLE.owns(pk) for pk in _every_key(SINGLE, uid, other))


@given(tenant=tenants, uid=ids, other=ids)
def test_a_tenant_space_prefixes_every_partition_key_and_parses_back(tenant: str, uid: str, other: str) -> None:
    space = tenant_space(tenant)
    prefix = f"N#{tenant}#"
    for pk in _every_key(space, uid, other):
        assert pk.startswith(prefix)
        assert space.owns(pk)
        assert not SINGLE.owns(pk)
    assert space.user_of(space.user_pk(uid)) == uid
    assert space.parse_task_key(space.task_key(uid, other)) == (uid, other)
    # the sort keys are the single line's
    assert space.task_key(uid, other)["SK"] == SINGLE.task_key(uid, other)["SK"]


@given(a=tenants, b=tenants, uid=ids, other=ids)
def test_two_tenants_never_share_a_partition(a: str, b: str, uid: str, other: str) -> None:
    if a == b:
        return
    space_a, space_b = tenant_space(a), tenant_space(b)
    keys_a = set(_every_key(space_a, uid, other))
    assert keys_a.isdisjoint(_every_key(space_b, uid, other))
    with pytest.raises(ValueError):
        space_b.user_of(space_a.user_pk(uid))
    with pytest.raises(ValueError):
        space_b.parse_task_key(space_a.task_key(uid, other))


@pytest.mark.parametrize("bad", ["", "x" * 129, "bad\nid", "a#U#b", "a b", "é"])
def test_unusable_tenant_ids_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        tenant_space(bad)


def test_no_adapter_builds_a_partition_key_outside_its_key_space() -> None:
    """Every DynamoDB adapter goes through the key space it was built with, never the module's single layout."""
    root = Path(keys.__file__).parent
    offenders = []
    for path in sorted(root.glob("*.py")):
        if path.name == "keys.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "keys"
                and node.attr in PARTITION_FUNCTIONS | {"USER_PREFIX", "DUE_PREFIX", "DONE_PREFIX"}
            ):
                offenders.append(f"{path.name}:{node.lineno} keys.{node.attr}")
    assert offenders == []
