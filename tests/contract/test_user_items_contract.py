"""CredentialStore, PushSubscriptionStore and DeliveryPolicyStore on every backend (see conftest)."""

from __future__ import annotations

import pytest
from amsg.ports import CapCharge, CredentialWrite, OwnerClaim

USER = "u-contract"
T1 = 1_893_456_000_000  # 2030-01-01T00:00:00.000Z
T2 = T1 + 5_000


def creds(*ids: str, value: str = "ct") -> list[CredentialWrite]:
    return [CredentialWrite(cred_id=i, encrypted_value=f"{value}-{i}") for i in ids]


# ---- credentials -----------------------------------------------------------------------------------------


def test_upsert_counts_distinct_ids_and_the_last_one_wins(stores):
    store = stores.credentials
    assert store.upsert(USER, [*creds("a", "b"), *creds("a", value="last")], T1) == 2
    assert store.upsert(USER, [], T1) == 0
    assert store.count(USER) == 2 and store.count("someone-else") == 0
    assert store.get_values(USER, ["a", "b", "missing", "a", ""]) == {"a": "last-a", "b": "ct-b"}


def test_overwrite_refreshes_updated_at(stores):
    store = stores.credentials
    store.upsert(USER, creds("k"), T1)
    store.upsert(USER, creds("k", value="rotated"), T2)
    assert store.list(USER) == [("k", T2)]
    assert store.get_values(USER, ["k"]) == {"k": "rotated-k"}
    assert store.count(USER) == 1


def test_more_than_a_hundred_ids_in_one_upsert_are_refused(stores):
    with pytest.raises(ValueError):
        stores.credentials.upsert(USER, creds(*[f"c{i}" for i in range(101)]), T1)
    assert stores.credentials.count(USER) == 0
    assert stores.credentials.upsert(USER, creds(*[f"c{i}" for i in range(100)]), T1) == 100


def test_list_is_in_binary_cred_id_order(stores):
    ids = ["b", "B", "é", "a/b", "a:b", "z", "\u4e2d", "~", "a"]
    stores.credentials.upsert(USER, creds(*ids), T1)
    assert [c for c, _ in stores.credentials.list(USER)] == sorted(ids, key=lambda c: c.encode("utf-8"))


def test_existing_ids_and_deletes(stores):
    store = stores.credentials
    store.upsert(USER, creds("char:a/chat", "char:ab/chat", "char:b/chat", "global/chat"), T1)
    store.upsert("someone-else", creds("char:a/chat"), T1)
    assert store.existing_cred_ids(USER, ["char:a/chat", "nope"]) == {"char:a/chat"}
    assert store.delete_prefix(USER, "") == 0  # an empty prefix deletes nothing
    assert store.delete_prefix(USER, "char:a") == 2  # a plain prefix: "char:ab/chat" too
    assert store.delete_ids(USER, ["global/chat", "global/chat", "nope"]) == 1
    assert [c for c, _ in store.list(USER)] == ["char:b/chat"]
    assert store.delete_all(USER) == 1 and store.count(USER) == 0
    assert store.delete_all(USER) == 0
    assert store.count("someone-else") == 1


def test_the_fake_refuses_owned_credentials():
    from tests.support.fakes import MemoryCredentialStore, NotFaked

    owned = CredentialWrite("a", "ct", owner=OwnerClaim(ref="r", generation=1))
    with pytest.raises(NotFaked):
        MemoryCredentialStore().upsert(USER, [owned], T1)


# ---- push subscription -----------------------------------------------------------------------------------


def test_subscription_put_overwrites_get_and_delete(stores):
    store = stores.subscriptions
    assert store.get_push_subscription(USER) is None
    assert store.delete_push_subscription(USER) is False
    store.put_push_subscription(USER, "ct-1", 10)
    store.put_push_subscription(USER, "ct-2", 5)  # no comparison: the last write wins
    got = store.get_push_subscription(USER)
    assert (got.encrypted_subscription, got.updated_at) == ("ct-2", 5)
    assert store.get_push_subscription("someone-else") is None
    assert store.delete_push_subscription(USER) is True
    assert store.get_push_subscription(USER) is None


# ---- delivery policy -------------------------------------------------------------------------------------


def test_policy_put_overwrites_get_and_delete(stores):
    store = stores.policies
    assert store.get_policy(USER) is None
    assert store.delete_policy(USER) is False
    store.put_policy(USER, "ct-1", 10)
    store.put_policy(USER, "ct-2", 11)
    got = store.get_policy(USER)
    assert (got.encrypted_policy, got.updated_at) == ("ct-2", 11)
    assert store.delete_policy(USER) is True and store.get_policy(USER) is None


def test_cap_room_of_counters_never_charged(stores):
    """Counters are charged by the outbox's send claim (test_claims_contract.py); one never charged has room."""
    assert stores.policies.cap_room(USER, [CapCharge("c", 1, T2, "o"), CapCharge("d", 5, T2, "o")]) is None
    assert stores.policies.cap_room(USER, [CapCharge("c", 0, T2, "o")]) == T2  # a zero cap is always full
