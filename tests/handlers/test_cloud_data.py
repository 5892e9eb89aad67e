"""``/cloud-data/*`` through the real handler on moto: the switch, the POST gate, routing by suffix, the
inventory (summary and paged snapshots) and owner state (list, get, restore)."""

from __future__ import annotations

import hashlib
import json

import pytest
from amsg.crypto import compact_json
from amsg.domain.ownership import owner_ref

from tests.conftest import T0_MS, moto_table_resource
from tests.support.wire_client import dummy_subscription

FIRST = "2029-12-31T00:01:00.000Z"
ALICE = {"type": "character", "id": "alice", "label": "Alice"}
BOB = {"type": "character", "id": "bob"}


def get(api, path: str, prefix: str = ""):
    return api.request("GET", f"{prefix}/cloud-data/{path}")


def post(api, path: str, body):
    return api.send_encrypted("POST", f"/cloud-data/{path}", body)


def err(resp, status: int, code: str) -> None:
    assert resp.status == status, resp.text
    assert resp.body["success"] is False and resp.body["error"]["code"] == code, resp.text


def retire(ctx, user_id: str, owner: dict) -> None:
    ref = owner_ref(owner["type"], owner["id"])
    state = ctx.owners.get(user_id, ref)
    ctx.owners.set_active(
        user_id, ref, owner["type"], owner["id"], active=False, expected=state.generation if state else 0,
        now_ms=ctx.now_ms(),
    )  # fmt: skip


def seed(api) -> dict[str, str]:
    """A subscription, two owned tasks and one unowned, owned and unowned state and credentials."""
    assert api.put_subscription(dummy_subscription()).status == 200
    uuids = {}
    for name, owner in (("alice", ALICE), ("bob", BOB), ("none", None)):
        payload = {"contactName": "Rei", "messageType": "fixed", "userMessage": "secret text", "firstSendTime": FIRST}
        if owner:
            payload["owner"] = owner
        resp = api.schedule(payload)
        assert resp.status == 201, resp.text
        uuids[name] = resp.data["uuid"]
    state = [
        {"namespace": "char", "key": "alice", "value": "v" * 10, "updatedAt": T0_MS - 1, "owner": ALICE},
        {"namespace": "char", "key": "global", "value": "g", "updatedAt": T0_MS - 1},
    ]
    assert api.put_client_state(state).status == 200
    value = {"apiUrl": "https://llm.example/v1", "apiKey": "sk-secret-key", "primaryModel": "m"}
    assert (
        api.put_credentials(
            [{"credId": "alice/chat", "value": value, "owner": {"type": "character", "id": "alice"}}]
        ).status
        == 200
    )
    return uuids


# ---- switch, gate, routing -------------------------------------------------------------------------------


def test_disabled_answers_501_after_auth_and_user_checks(make_context):
    from tests.support.inprocess import InProcessApi
    from tests.support.wire_client import WireClient

    make_context(AMSG_CLOUD_DATA_MANAGEMENT="false")
    api = WireClient(InProcessApi(), user_id="00000000-0000-4000-8000-000000000001")
    api.init()
    assert "cloud-data-management" not in api.capabilities().body["features"]
    err(api.request("GET", "/cloud-data/summary", user=False), 400, "USER_ID_REQUIRED")
    resp = get(api, "summary")
    err(resp, 501, "CLOUD_DATA_NOT_SUPPORTED")
    assert resp.body["error"]["message"]
    err(post(api, "owner", {"action": "restore", "owner": ALICE}), 501, "CLOUD_DATA_NOT_SUPPORTED")


def test_enabled_is_advertised_and_served_at_both_prefixes(api):
    assert "cloud-data-management" in api.capabilities().body["features"]
    for prefix in ("", "/api/v1"):
        resp = get(api, "summary", prefix)
        assert resp.status == 200 and resp.body["encrypted"] is True
        assert resp.data == {
            "total": 0,
            "counts": [
                {"type": t, "count": 0, "byteSize": 0}
                for t in ("task", "state", "credential", "outbox", "subscription")
            ],
            "complete": True,
            "gaps": [],
        }


def test_post_gate_runs_before_routing(api):
    headers = {"Content-Type": "application/json"}
    err(api.request("POST", "/cloud-data/nowhere", headers=headers, body="{}"), 400, "ENCRYPTION_REQUIRED")
    only_one = {**headers, "X-Payload-Encrypted": "true"}
    err(api.request("POST", "/cloud-data/owner", headers=only_one, body="{}"), 400, "ENCRYPTION_REQUIRED")
    both = {**headers, "X-Payload-Encrypted": "true", "X-Encryption-Version": "1"}
    err(api.request("POST", "/cloud-data/owner", headers=both, body="[1]"), 400, "INVALID_PAYLOAD")
    bad = json.dumps({"iv": "00" * 12, "authTag": "00" * 16, "encryptedData": "00"})
    err(api.request("POST", "/cloud-data/owner", headers=both, body=bad), 400, "DECRYPTION_FAILED")
    err(post(api, "owner", ["not", "an", "object"]), 400, "INVALID_PAYLOAD")


def test_unknown_sub_routes_and_trailing_slashes(api):
    err(get(api, "inventory"), 404, "NOT_FOUND")
    err(get(api, "owners/"), 404, "NOT_FOUND")
    err(get(api, "cleanup-operations/"), 404, "CLOUD_RECORD_NOT_FOUND")
    err(get(api, "cleanup-operations/no-such-op"), 404, "CLOUD_RECORD_NOT_FOUND")
    err(post(api, "summary", {}), 404, "NOT_FOUND")


# ---- inventory -------------------------------------------------------------------------------------------


def test_summary_counts_everything_stored_and_validates_filters(api):
    seed(api)
    resp = get(api, "summary?type=task")  # filters are validated, not applied
    assert resp.status == 200, resp.text
    counts = {c["type"]: c["count"] for c in resp.data["counts"]}
    assert counts == {"task": 3, "state": 2, "credential": 1, "outbox": 0, "subscription": 1}
    assert resp.data["total"] == 7 and resp.data["complete"] is True
    assert all(c["byteSize"] > 0 for c in resp.data["counts"] if c["count"])
    err(get(api, "summary?ownerType=character"), 400, "INVALID_CLOUD_FILTER")
    err(get(api, "summary?ownerId=alice"), 400, "INVALID_CLOUD_FILTER")
    err(get(api, "summary?type=chunk"), 400, "INVALID_CLOUD_FILTER")


def test_resources_are_projected_without_secrets_with_stable_ids(api):
    uuids = seed(api)
    resp = get(api, "resources")
    assert resp.status == 200, resp.text
    data = resp.data
    assert data["nextCursor"] is None and data["complete"] is True and data["summary"]["total"] == 7
    ids = [r["id"] for r in data["resources"]]
    assert ids == sorted(ids)
    text = json.dumps(data)
    for secret in ("secret text", "sk-secret-key", "push.example.test", "vvvvvvvvvv"):
        assert secret not in text
    by_label = {r["label"]: r for r in data["resources"]}
    task = by_label[uuids["alice"]]
    expected_id = hashlib.sha256(
        compact_json([api.user_id, compact_json(["task", uuids["alice"]])]).encode("utf-8")
    ).hexdigest()
    assert task["id"] == expected_id
    assert task["owner"] == ALICE and task["status"] == "pending" and task["type"] == "task"
    assert by_label[uuids["none"]]["owner"] is None
    # an owner without a label takes the label of the newest labelled resource of that owner
    assert by_label["char/alice"]["owner"] == ALICE
    assert by_label["alice/chat"]["owner"] == ALICE and by_label["alice/chat"]["status"] is None
    assert by_label["Web Push subscription"]["status"] == "registered"
    assert by_label["char/global"]["owner"] is None
    assert get(api, "resources").data["resources"] == data["resources"]  # stable


def test_resources_pages_through_a_frozen_snapshot(api, ctx):
    uuids = seed(api)
    first = get(api, "resources?limit=3")
    assert first.status == 200 and len(first.data["resources"]) == 3
    cursor = first.data["nextCursor"]
    assert cursor and cursor.endswith(":3")
    # a write after the snapshot does not change the pages of this session
    api.cancel(uuids["none"])
    second = get(api, f"resources?limit=3&cursor={cursor}")
    third = get(api, f"resources?limit=3&cursor={second.data['nextCursor']}")
    assert third.data["nextCursor"] is None
    pages = first.data["resources"] + second.data["resources"] + third.data["resources"]
    assert len(pages) == 7 and len({r["id"] for r in pages}) == 7
    # the owner filter, and a cursor used with another filter
    alice = get(api, "resources?ownerType=character&ownerId=alice&limit=1")
    assert alice.data["summary"]["total"] == 6
    assert {r["owner"]["id"] for r in alice.data["resources"]} == {"alice"}
    err(get(api, f"resources?cursor={alice.data['nextCursor']}"), 409, "CLOUD_CURSOR_EXPIRED")
    tasks = get(api, "resources?type=task").data["resources"]
    assert [r["type"] for r in tasks] == ["task", "task"]
    # expiry after 15 minutes
    ctx.clock.current_ms += 15 * 60_000 + 1
    err(get(api, f"resources?limit=3&cursor={cursor}"), 409, "CLOUD_CURSOR_EXPIRED")


@pytest.mark.parametrize("limit", ["0", "201", "1.5", "abc", "-1"])
def test_resources_limit_must_be_1_to_200(api, limit):
    err(get(api, f"resources?limit={limit}"), 400, "INVALID_CLOUD_LIMIT")


def test_resources_cursor_errors(api, ctx):
    seed(api)
    err(get(api, "resources?cursor=nope"), 400, "INVALID_CLOUD_CURSOR")
    err(get(api, "resources?cursor=00000000-0000-4000-8000-000000000000:0"), 404, "CLOUD_RECORD_NOT_FOUND")
    cursor = get(api, "resources?limit=1").data["nextCursor"]
    snapshot = cursor.split(":")[0]
    err(get(api, f"resources?cursor={snapshot}:99"), 400, "INVALID_CLOUD_CURSOR")
    assert get(api, f"resources?cursor={snapshot}:7").data["resources"] == []
    # another user never reads this snapshot
    from tests.support.inprocess import InProcessApi
    from tests.support.wire_client import WireClient

    other = WireClient(InProcessApi(), user_id="00000000-0000-4000-8000-00000000000f")
    other.init()
    err(get(other, f"resources?cursor={cursor}"), 404, "CLOUD_RECORD_NOT_FOUND")


# ---- owners ----------------------------------------------------------------------------------------------


def test_owner_state_list_get_and_restore(api, ctx):
    assert get(api, "owners").data == {"owners": [], "complete": True, "gaps": []}
    never = get(api, "owner?ownerType=character&ownerId=zed")
    assert never.data == {
        "owner": {"type": "character", "id": "zed"}, "retired": False, "generation": 0, "updatedAt": None,
        "complete": True, "gaps": [],
    }  # fmt: skip
    err(get(api, "owner?ownerType=character"), 400, "INVALID_CLOUD_OWNER")
    err(get(api, "owner?ownerType=character&ownerId=" + "x" * 301), 400, "INVALID_CLOUD_OWNER")

    retire(ctx, api.user_id, ALICE)
    retire(ctx, api.user_id, BOB)
    owners = get(api, "owners").data["owners"]
    assert [(o["owner"], o["retired"], o["generation"]) for o in owners] == [
        ({"type": "character", "id": "alice"}, True, 1),
        ({"type": "character", "id": "bob"}, True, 1),
    ]
    assert owners[0]["updatedAt"] == T0_MS

    err(post(api, "owner", {"action": "restore", "owner": {"type": "", "id": "x"}}), 400, "INVALID_CLOUD_OWNER")
    err(post(api, "owner", {"action": "retire", "owner": ALICE}), 400, "INVALID_CLOUD_OWNER_ACTION")
    restored = post(api, "owner", {"action": "restore", "owner": {**ALICE, "extra": 1}})
    assert restored.status == 200, restored.text
    assert restored.data["owner"] == {**ALICE, "extra": 1}  # echoed as given
    assert restored.data["retired"] is False and restored.data["generation"] == 2
    again = post(api, "owner", {"action": "restore", "owner": ALICE})
    assert again.data["generation"] == 2  # idempotent on an active owner
    never = post(api, "owner", {"action": "restore", "owner": {"type": "character", "id": "new"}})
    assert never.data["generation"] == 0 and never.data["updatedAt"] is None
    # the restored generation is what writes must now assert
    assert api.put_subscription(dummy_subscription()).status == 200
    base = {"contactName": "Rei", "messageType": "fixed", "userMessage": "x", "firstSendTime": FIRST, "owner": ALICE}
    assert api.schedule(base).status == 409
    assert api.schedule({**base, "ownerGeneration": 2}).status == 201


# ---- cleanup plans and operations ------------------------------------------------------------------------


def test_retire_owner_fences_then_deletes_everything_it_owns(api, ctx):
    uuids = seed(api)
    plan = post(api, "cleanup-plans", {"mode": "retire-owner", "owner": ALICE})
    assert plan.status == 200, plan.text
    assert plan.data["ownerGeneration"] == 0 and plan.data["count"] == 3
    assert {c["type"]: c["count"] for c in plan.data["counts"]}["task"] == 1
    assert len(plan.data["impacts"]) == 2 and plan.data["complete"] is True
    op = post(api, "cleanup-operations", {"planId": plan.data["id"], "idempotencyKey": "retire-alice"})
    assert op.status == 200, op.text
    assert op.data["status"] == "completed" and op.data["fencedGeneration"] == 1
    assert {c["type"]: c["deleted"] for c in op.data["counts"]} == {
        "task": 1, "state": 1, "credential": 1, "outbox": 0, "subscription": 0,
    }  # fmt: skip
    assert set(op.data) == {
        "id", "planId", "idempotencyKey", "mode", "owner", "ownerGeneration", "fencedGeneration", "status",
        "counts", "errors", "createdAt", "updatedAt",
    }  # fmt: skip
    labels = {r["label"] for r in get(api, "resources").data["resources"]}
    assert uuids["alice"] not in labels and "char/alice" not in labels and "alice/chat" not in labels
    assert uuids["bob"] in labels and "char/global" in labels  # the other owner and global data are untouched
    # its writes are refused now; the same key replays the same operation; another plan with it conflicts
    err(api.put_client_state([{"namespace": "char", "key": "x", "value": "v", "updatedAt": T0_MS, "owner": ALICE}]),
        409, "CLOUD_OWNER_RETIRED")  # fmt: skip
    again = post(api, "cleanup-operations", {"planId": plan.data["id"], "idempotencyKey": "retire-alice"})
    assert again.data["id"] == op.data["id"]
    other = post(api, "cleanup-plans", {"mode": "retire-owner", "owner": BOB}).data
    err(post(api, "cleanup-operations", {"planId": other["id"], "idempotencyKey": "retire-alice"}), 409,
        "IDEMPOTENCY_CONFLICT")  # fmt: skip
    listed = get(api, "cleanup-operations").data
    assert [o["id"] for o in listed["operations"]] == [op.data["id"]]
    assert get(api, f"cleanup-operations/{op.data['id']}").data == again.data
    # restore brings the owner back at a new generation
    restored = post(api, "owner", {"action": "restore", "owner": ALICE}).data
    assert restored["generation"] == 2 and restored["retired"] is False


def test_purge_deletes_exactly_the_preview_and_refuses_a_changed_one(api, ctx):
    seed(api)
    resources = get(api, "resources").data["resources"]
    state = next(r for r in resources if r["label"] == "char/global")
    plan = post(api, "cleanup-plans", {"mode": "purge", "resourceIds": [state["id"]]}).data
    assert plan["ownerGeneration"] is None and plan["count"] == 1
    op = post(api, "cleanup-operations", {"planId": plan["id"], "idempotencyKey": "p1"}).data
    assert op["status"] == "completed"
    assert state["id"] not in {r["id"] for r in get(api, "resources").data["resources"]}
    # a resource written after the preview is not deleted
    cred = next(r for r in resources if r["label"] == "alice/chat")
    plan = post(api, "cleanup-plans", {"mode": "purge", "resourceIds": [cred["id"]]}).data
    value = {"apiUrl": "https://llm.example/v1", "apiKey": "sk-2", "primaryModel": "m"}
    assert api.put_credentials([{"credId": "alice/chat", "value": value}]).status == 200
    err(post(api, "cleanup-operations", {"planId": plan["id"], "idempotencyKey": "p2"}), 409, "CLOUD_PLAN_CHANGED")
    assert cred["id"] in {r["id"] for r in get(api, "resources").data["resources"]}


def test_cleanup_validation_errors(api, ctx):
    seed(api)
    err(post(api, "cleanup-plans", {"mode": "wipe"}), 400, "INVALID_CLEANUP_MODE")
    err(post(api, "cleanup-plans", {"mode": "retire-owner"}), 400, "INVALID_CLOUD_OWNER")
    err(post(api, "cleanup-plans", {"mode": "purge", "owner": {"type": "c"}}), 400, "INVALID_CLOUD_OWNER")
    err(post(api, "cleanup-plans", {"mode": "purge"}), 400, "INVALID_CLEANUP_SELECTION")
    err(post(api, "cleanup-plans", {"mode": "purge", "resourceIds": []}), 400, "INVALID_CLEANUP_SELECTION")
    err(post(api, "cleanup-plans", {"mode": "purge", "owner": ALICE, "types": ["chunk"]}), 400,
        "INVALID_CLEANUP_SELECTION")  # fmt: skip
    err(post(api, "cleanup-plans", {"mode": "retire-owner", "owner": ALICE, "types": ["task"]}), 400,
        "INVALID_CLEANUP_SELECTION")  # fmt: skip
    err(post(api, "cleanup-plans", {"mode": "purge", "resourceIds": ["0" * 64]}), 409, "CLOUD_RESOURCE_NOT_FOUND")
    err(post(api, "cleanup-operations", {"planId": "x"}), 400, "INVALID_CLEANUP_OPERATION")
    err(post(api, "cleanup-operations", {"planId": "x", "idempotencyKey": " "}), 400, "INVALID_CLEANUP_OPERATION")
    err(post(api, "cleanup-operations", {"planId": "x", "idempotencyKey": "k" * 201}), 400,
        "INVALID_CLEANUP_OPERATION")  # fmt: skip
    err(post(api, "cleanup-operations", {"planId": "nope", "idempotencyKey": "k"}), 404, "CLOUD_RECORD_NOT_FOUND")
    plan = post(api, "cleanup-plans", {"mode": "retire-owner", "owner": ALICE}).data
    ctx.clock.current_ms += 15 * 60_000 + 1
    err(post(api, "cleanup-operations", {"planId": plan["id"], "idempotencyKey": "k"}), 409, "CLOUD_PLAN_EXPIRED")
    plan = post(api, "cleanup-plans", {"mode": "retire-owner", "owner": ALICE}).data
    retire(ctx, api.user_id, ALICE)  # the owner changed since the preview
    err(post(api, "cleanup-operations", {"planId": plan["id"], "idempotencyKey": "k2"}), 409, "CLOUD_PLAN_CHANGED")


def test_a_purge_covers_at_most_max_purge_resources(api, monkeypatch):
    from amsg.api import cloud_cleanup

    seed(api)
    monkeypatch.setattr(cloud_cleanup, "MAX_PURGE_RESOURCES", 2)  # alice owns a task, a state entry, a credential
    resp = post(api, "cleanup-plans", {"mode": "purge", "owner": ALICE})
    err(resp, 400, "INVALID_CLEANUP_SELECTION")
    assert resp.body["error"]["details"] == {"selected": 3, "max": 2}
    assert post(api, "cleanup-plans", {"mode": "purge", "owner": ALICE, "types": ["task"]}).status == 200
    assert post(api, "cleanup-plans", {"mode": "retire-owner", "owner": ALICE}).status == 200  # no such limit


def _scan() -> list[dict]:
    from tests.conftest import TABLE

    table = moto_table_resource(TABLE)
    items, kwargs = [], {}
    while True:
        page = table.scan(**kwargs)
        items += page["Items"]
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def test_nothing_is_left_behind_after_a_retirement_or_a_purge(api, ctx):
    """Large values (task payload parts, client-state parts, outbox payload parts), uuid registry entries and
    outbox rows go with the resource they belong to."""
    from amsg.crypto import encrypt_for_storage
    from amsg.ports import OutboxAppend, OwnerClaim

    assert api.put_subscription(dummy_subscription()).status == 200
    big = "长" * 150_000
    for owner in (ALICE, BOB):
        created = api.schedule(
            {"contactName": "Rei", "messageType": "fixed", "userMessage": big, "firstSendTime": FIRST, "owner": owner}
        )
        assert created.status == 201, created.text
        entry = {"namespace": "big", "key": owner["id"], "value": big, "updatedAt": T0_MS - 1, "owner": owner}
        assert api.put_client_state([entry]).status == 200
        claim = OwnerClaim(ref=owner_ref(owner["type"], owner["id"]), generation=0)
        ctx.outbox.append(
            api.user_id,
            [OutboxAppend(f"{owner['id']}-m", encrypt_for_storage(big, api.user_key), T0_MS, owner=claim)],
        )
    kinds = {i["SK"].split("#")[0] for i in _scan() if i["PK"] == f"U#{api.user_id}"}
    assert {"TP", "SC", "OP", "O", "T", "S"} <= kinds  # the large values really are split

    plan = post(api, "cleanup-plans", {"mode": "retire-owner", "owner": ALICE}).data
    assert {c["type"]: c["count"] for c in plan["counts"]} == {
        "task": 1, "state": 1, "credential": 0, "outbox": 1, "subscription": 0,
    }  # fmt: skip
    op = post(api, "cleanup-operations", {"planId": plan["id"], "idempotencyKey": "a"}).data
    assert op["status"] == "completed"
    left = [i for i in _scan() if "alice" in str(i.get("key", "")) + str(i.get("message_id", ""))]
    assert left == []
    alice_task = [
        i for i in _scan() if i["SK"].startswith("T#") and i.get("owner_ref") == owner_ref("character", "alice")
    ]
    assert alice_task == []

    # purge Bob's three resources: only the owner item, counters, the subscription and records remain
    ids = [r["id"] for r in get(api, "resources?ownerType=character&ownerId=bob").data["resources"]]
    assert len(ids) == 3
    plan = post(api, "cleanup-plans", {"mode": "purge", "resourceIds": ids}).data
    assert post(api, "cleanup-operations", {"planId": plan["id"], "idempotencyKey": "b"}).data["status"] == "completed"
    remaining = {i["SK"].split("#")[0] for i in _scan() if i["PK"] == f"U#{api.user_id}"}
    assert remaining <= {"W", "SEQ", "PUSH", "R"}, remaining
    assert [i for i in _scan() if i["PK"].startswith("TU#")] == []


def test_a_start_that_loses_the_idempotency_race_continues_the_winner(api, ctx, monkeypatch):
    """Two starts with one key: the key record is created first-writer-wins; the loser drops its own record and
    returns the winner's operation (simulated: the loser read the key before the winner wrote it)."""
    seed(api)
    plan = post(api, "cleanup-plans", {"mode": "purge", "owner": BOB}).data
    winner = post(api, "cleanup-operations", {"planId": plan["id"], "idempotencyKey": "same"}).data
    store = ctx.cloud_data
    real_get = store.get_record
    calls = {"n": 0}

    def stale_first_read(user_id, kind, record_id, **kwargs):
        if kind == "opkey" and calls["n"] == 0:
            calls["n"] += 1
            return None
        return real_get(user_id, kind, record_id, **kwargs)

    monkeypatch.setattr(store, "get_record", stale_first_read)
    plan_again = post(api, "cleanup-plans", {"mode": "purge", "owner": ALICE}).data
    # the plan differs: the loser must answer IDEMPOTENCY_CONFLICT and leave no operation of its own behind
    err(post(api, "cleanup-operations", {"planId": plan_again["id"], "idempotencyKey": "same"}), 409,
        "IDEMPOTENCY_CONFLICT")  # fmt: skip
    assert [o["id"] for o in get(api, "cleanup-operations").data["operations"]] == [winner["id"]]
