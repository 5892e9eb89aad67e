"""Cloud-data owner guards on ordinary writes, through the real handlers on moto.

A write naming an owner (``owner`` / ``kind`` / ``ownerGeneration`` on a schedule payload, a client-state entry
or a credential entry) commits only while that owner is active at the asserted generation; ownership recorded
on an item cannot be changed by an ordinary write; violations answer 409 ``{code, message}``. Owners are
retired / restored here through the owner store (the operation that does it for clients is tested on its own).
"""

from __future__ import annotations

from amsg.domain.ownership import owner_ref

from tests.conftest import T0_MS, TABLE, moto_table_resource

FIRST = "2029-12-31T00:01:00.000Z"  # T0 + 60 s
ALICE = {"type": "character", "id": "alice", "label": "Alice"}
BOB = {"type": "character", "id": "bob"}


def items(prefix: str = "") -> list[dict]:
    table = moto_table_resource(TABLE)
    found, kwargs = [], {}
    while True:
        page = table.scan(**kwargs)
        found += page["Items"]
        if "LastEvaluatedKey" not in page:
            return [i for i in found if i["SK"].startswith(prefix)]
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def set_owner(ctx, user_id: str, owner: dict, *, active: bool) -> int:
    """Retire or restore (generation + 1), as the cleanup operation / restore route do."""
    ref = owner_ref(owner["type"], owner["id"])
    current = ctx.owners.get(user_id, ref)
    state = ctx.owners.set_active(
        user_id, ref, owner["type"], owner["id"], active=active, expected=current.generation if current else 0,
        now_ms=ctx.now_ms(),
    )  # fmt: skip
    return state.generation


def payload(**fields):
    return {"contactName": "Rei", "messageType": "fixed", "userMessage": "hi", "firstSendTime": FIRST, **fields}


def with_subscription(api):
    from tests.support.wire_client import dummy_subscription

    assert api.put_subscription(dummy_subscription()).status == 200


def assert_guard(resp, code: str) -> None:
    assert resp.status == 409, resp.text
    assert resp.body["success"] is False
    assert resp.body["error"]["code"] == code
    assert set(resp.body["error"]) == {"code", "message"}


# ---- schedule-message / update-message ---------------------------------------------------------------------


def test_owned_task_records_its_owner_and_retirement_refuses_new_tasks(api, ctx):
    with_subscription(api)
    created = api.schedule(payload(owner=ALICE, kind="reminder"))
    assert created.status == 201, created.text
    task = next(i for i in items("T#") if i["uuid"] == created.data["uuid"])
    assert task["owner_ref"] == owner_ref("character", "alice") and task["owner_gen"] == 0
    assert "alice" not in str(task["cloud_meta"])  # the ownership record is encrypted

    assert set_owner(ctx, api.user_id, ALICE, active=False) == 1
    assert_guard(api.schedule(payload(owner=ALICE)), "CLOUD_OWNER_RETIRED")
    assert_guard(api.schedule(payload(owner=ALICE, ownerGeneration=1)), "CLOUD_OWNER_RETIRED")  # inactive
    assert api.schedule(payload(owner=BOB)).status == 201  # another owner is untouched
    assert api.schedule(payload()).status == 201  # unowned writes never check anything

    assert set_owner(ctx, api.user_id, ALICE, active=True) == 2
    assert_guard(api.schedule(payload(owner=ALICE)), "CLOUD_OWNER_RETIRED")  # generation 0 stays dead
    assert api.schedule(payload(owner=ALICE, ownerGeneration=2)).status == 201
    assert len([i for i in items("T#")]) == 4


def test_owner_in_metadata_cloud_owner_counts_and_bad_owners_are_409(api, ctx):
    with_subscription(api)
    set_owner(ctx, api.user_id, ALICE, active=False)
    assert_guard(api.schedule(payload(metadata={"cloudOwner": ALICE})), "CLOUD_OWNER_RETIRED")
    assert_guard(api.schedule(payload(owner={"type": " ", "id": "x"})), "INVALID_CLOUD_OWNER")
    assert_guard(api.schedule(payload(owner={"type": "c", "id": "x" * 301})), "INVALID_CLOUD_OWNER")
    assert_guard(api.schedule(payload(owner="alice")), "INVALID_CLOUD_OWNER")
    assert_guard(api.schedule(payload(owner=BOB, ownerGeneration=-1)), "INVALID_CLOUD_OWNER_GENERATION")
    assert_guard(api.schedule(payload(owner=BOB, ownerGeneration=1.5)), "INVALID_CLOUD_OWNER_GENERATION")
    assert items("T#") == []


def test_client_cannot_forge_the_stored_guard(api, ctx):
    with_subscription(api)
    forged = {"owner": BOB, "generation": 0}
    created = api.schedule(payload(__cloudOwnerGuard=forged))
    assert created.status == 201
    task = next(i for i in items("T#"))
    assert "owner_ref" not in task


def test_update_of_an_owned_task_is_refused_after_retirement_and_keeps_ownership(api, ctx):
    with_subscription(api)
    uuid = api.schedule(payload(owner=ALICE)).data["uuid"]
    # an update can never move the task to another owner
    assert api.update(uuid, {"userMessage": "changed", "owner": BOB, "ownerGeneration": 9}).status == 200
    task = next(i for i in items("T#"))
    assert task["owner_ref"] == owner_ref("character", "alice")
    set_owner(ctx, api.user_id, ALICE, active=False)
    assert_guard(api.update(uuid, {"userMessage": "after"}), "CLOUD_OWNER_RETIRED")
    assert api.cancel(uuid).status == 200  # deletes are never guarded


# ---- client state ----------------------------------------------------------------------------------------


def entry(key: str, value, **extra):
    return {"namespace": "ns", "key": key, "value": value, "updatedAt": T0_MS - 1000, **extra}


def test_client_state_ownership_is_guarded_inherited_and_immutable(api, ctx):
    resp = api.put_client_state([entry("a", "1", owner=ALICE, kind="context"), entry("b", "2", owner=BOB)])
    assert resp.status == 200, resp.text
    root = next(i for i in items("S#") if i["key"] == "a")
    assert root["owner_ref"] == owner_ref("character", "alice")

    # naming another owner for an owned key is refused
    assert_guard(api.put_client_state([entry("a", "x", owner=BOB, updatedAt=T0_MS)]), "CLOUD_OWNER_IMMUTABLE")
    # an unnamed write inherits the recorded owner (and its record stays)
    assert api.put_client_state([{**entry("a", "3"), "updatedAt": T0_MS - 500}]).status == 200
    root = next(i for i in items("S#") if i["key"] == "a")
    assert root["owner_ref"] == owner_ref("character", "alice") and root["cloud_meta"]

    set_owner(ctx, api.user_id, ALICE, active=False)
    later = T0_MS - 100
    assert_guard(api.put_client_state([{**entry("a", "4"), "updatedAt": later}]), "CLOUD_OWNER_RETIRED")
    assert_guard(api.put_client_state([{**entry("a", None), "updatedAt": later}]), "CLOUD_OWNER_RETIRED")
    assert_guard(api.put_client_state([entry("new", "n", owner=ALICE)]), "CLOUD_OWNER_RETIRED")
    # the whole request is refused: Bob's entry in the same batch did not land either
    mixed = [{**entry("b", "bob-2"), "updatedAt": later}, entry("new", "n", owner=ALICE)]
    assert_guard(api.put_client_state(mixed), "CLOUD_OWNER_RETIRED")
    values = {e["key"]: e["value"] for e in api.get_client_state("ns").data["entries"]}
    assert values == {"a": "3", "b": "2"}
    assert api.put_client_state([{**entry("b", "bob-3"), "updatedAt": later}]).status == 200
    # a generation for the new owner state works after a restore
    generation = set_owner(ctx, api.user_id, ALICE, active=True)
    ok = api.put_client_state([{**entry("a", "5", ownerGeneration=generation), "updatedAt": later}])
    assert ok.status == 200, ok.text


def test_client_state_bad_owner_fields_are_409(api):
    assert_guard(api.put_client_state([entry("a", "1", owner={"type": "c"})]), "INVALID_CLOUD_OWNER")
    assert_guard(
        api.put_client_state([entry("a", "1", owner=ALICE, ownerGeneration="1")]), "INVALID_CLOUD_OWNER_GENERATION"
    )
    assert items("S#") == []


# ---- llm credentials -------------------------------------------------------------------------------------


def cred(cred_id: str, **extra):
    return {
        "credId": cred_id,
        "value": {"apiUrl": "https://llm.example/v1", "apiKey": "sk-1", "primaryModel": "m"},
        **extra,
    }


def test_credentials_ownership_is_guarded_inherited_and_immutable(api, ctx):
    assert api.put_credentials([cred("alice/chat", owner=ALICE), cred("global")]).status == 200
    item = next(i for i in items("C#") if i["cred_id"] == "alice/chat")
    assert item["owner_ref"] == owner_ref("character", "alice")
    assert_guard(api.put_credentials([cred("alice/chat", owner=BOB)]), "CLOUD_OWNER_IMMUTABLE")
    assert api.put_credentials([cred("alice/chat")]).status == 200  # inherits Alice
    set_owner(ctx, api.user_id, ALICE, active=False)
    assert_guard(api.put_credentials([cred("alice/chat")]), "CLOUD_OWNER_RETIRED")
    assert_guard(api.put_credentials([cred("global"), cred("alice/new", owner=ALICE)]), "CLOUD_OWNER_RETIRED")
    assert [i["cred_id"] for i in items("C#")] == ["alice/chat", "global"]
    assert api.put_credentials([cred("global")]).status == 200
    assert api.delete_credentials({"credIds": ["alice/chat"]}).status == 200  # deletes are never guarded


# ---- delivery --------------------------------------------------------------------------------------------


def test_a_retired_owners_due_task_is_cancelled_and_never_fires_again(engine):
    env = engine
    alice = env.api.schedule(payload(owner=ALICE, userMessage="from alice"))
    bob = env.api.schedule(payload(owner=BOB, userMessage="from bob"))
    assert alice.status == 201 and bob.status == 201
    set_owner(env.ctx, env.api.user_id, ALICE, active=False)
    env.ctx.clock.current_ms = T0_MS + 61_000
    env.harness.tick()
    env.harness.drain()
    assert [p["message"] for p in env.push.payloads()] == ["from bob"]
    task = next(i for i in items("T#") if i["uuid"] == alice.data["uuid"])
    assert task["status"] == "failed" and "due_pk" not in task
    assert "CLOUD_OWNER_RETIRED" in task["last_error"]
    assert [i for i in items("O#") if i.get("task_uuid") == alice.data["uuid"]] == []
    # restoring the owner does not revive the task: later ticks claim nothing
    set_owner(env.ctx, env.api.user_id, ALICE, active=True)
    env.ctx.clock.current_ms = T0_MS + 3_600_000
    assert env.harness.tick()["claimedTasks"] == 0


def test_retirement_between_outbox_append_and_push_sends_nothing(engine, monkeypatch):
    """The push claim carries the owner check: a retirement after the batch is in the outbox stops every push
    (the general append, which claims no push; the one-transaction append is below)."""
    from amsg.engine import delivery
    from amsg.ports import APPEND_FALLBACK

    env = engine
    env.api.schedule(payload(owner=ALICE, userMessage="one。two。three"))
    monkeypatch.setattr(env.ctx.claims, "append_batch", lambda *a, **k: APPEND_FALLBACK)
    original = delivery.append_batch

    def append_then_retire(ctx, row, pushes, user_key):
        original(ctx, row, pushes, user_key)
        set_owner(ctx, row.user_id, ALICE, active=False)

    monkeypatch.setattr(delivery, "append_batch", append_then_retire)
    env.ctx.clock.current_ms = T0_MS + 61_000
    env.harness.tick()
    env.harness.drain()
    assert env.push.payloads() == []
    task = next(i for i in items("T#"))
    assert task["status"] == "failed" and "CLOUD_OWNER_RETIRED" in task["last_error"]
    assert [i for i in items("O#") if "delivered_at" in i or "sending_at" in i] == []


def test_retirement_after_the_one_transaction_append_stops_the_pushes_after_the_first(engine, monkeypatch):
    """An owned task's batch is appended, adopted and its first push claimed in one transaction with the owner
    check: the first push was claimed while the owner held (it goes, as a push claimed just before a retirement
    always could); every later push claim carries the check and is refused."""
    env = engine
    env.api.schedule(payload(owner=ALICE, userMessage="one。two。three"))
    claims = env.ctx.claims
    original = claims.append_batch

    def append_then_retire(row, rows, **kwargs):
        result = original(row, rows, **kwargs)
        assert isinstance(result, list)  # the one-transaction append applied
        set_owner(env.ctx, row.user_id, ALICE, active=False)
        return result

    monkeypatch.setattr(claims, "append_batch", append_then_retire)
    env.ctx.clock.current_ms = T0_MS + 61_000
    env.harness.tick()
    env.harness.drain()
    assert [p["message"] for p in env.push.payloads()] == ["one。"]
    task = next(i for i in items("T#"))
    assert task["status"] == "failed" and "CLOUD_OWNER_RETIRED" in task["last_error"]
    assert len([i for i in items("O#") if "sending_at" in i]) == 1
