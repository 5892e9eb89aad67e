"""GET /outbox, POST /outbox/ack, DELETE /outbox driven through the wire
client; rows are seeded through the store's engine-facing ``append`` exactly as the delivery engine does."""

from __future__ import annotations

import json

import pytest
from amsg.crypto import compact_json, encrypt_for_storage
from amsg.ports import OutboxAppend

from tests.conftest import T0_MS

pytestmark = pytest.mark.memory_store  # storage semantics only: the in-memory fakes (tests/contract checks them)

DAY = 86_400_000
TASK = "5f0c8a64-7c77-4f55-9a7e-1b6a0cf0a001"


def push_for(message_id: str, **extra) -> dict:
    return {"messageKind": "content", "messageId": message_id, "message": f"text of {message_id}", **extra}


def seed(ctx, api, message_ids, *, task_uuid=TASK, created_at=None, **extra) -> list[int]:
    key = ctx.user_key(api.user_id)
    rows = [
        OutboxAppend(
            message_id=mid,
            encrypted_push=encrypt_for_storage(compact_json(push_for(mid, **extra)), key),
            created_at=ctx.now_ms() if created_at is None else created_at,
            task_uuid=task_uuid,
            session_id=f"sess_{task_uuid}" if task_uuid else None,
            message_index=i + 1,
            total_messages=len(message_ids),
        )
        for i, mid in enumerate(message_ids)
    ]
    return ctx.outbox.append(api.user_id, rows)


def ids_of(entries) -> list[str]:
    return [entry["messageId"] for entry in entries]


# ---- GET ------------------------------------------------------------------------------------------------------


def test_list_shape_and_order(ctx, api):
    assert seed(ctx, api, ["m1", "m2", "m3"]) == [1, 2, 3]
    seed(ctx, api, ["loose"], task_uuid=None)
    resp = api.outbox()
    assert resp.status == 200, resp.text
    assert resp.body["encrypted"] is True
    data = resp.data
    assert data["cursor"] == 4 and data["hasMore"] is False
    first = data["entries"][0]
    assert first == {
        "id": 1,
        "messageId": "m1",
        "taskUuid": TASK,
        "sessionId": f"sess_{TASK}",
        "messageIndex": 1,
        "totalMessages": 3,
        "createdAt": T0_MS,
        "deliveredAt": None,
        "push": push_for("m1"),
    }
    assert data["entries"][3]["taskUuid"] is None and data["entries"][3]["sessionId"] is None
    assert ids_of(data["entries"]) == ["m1", "m2", "m3", "loose"]


def test_delivered_rows_are_listed_until_acked(ctx, api):
    seed(ctx, api, ["a", "b"])
    assert ctx.outbox.mark_delivered(api.user_id, ["a"], T0_MS + 5) == 1
    entries = api.outbox().data["entries"]
    assert [e["deliveredAt"] for e in entries] == [T0_MS + 5, None]


@pytest.mark.parametrize("since", ["-1", "1.5", "abc", " 1", "+1", "1e3", "0x10"])
def test_bad_cursor(api, since):
    resp = api.outbox(since=since)
    assert resp.status == 400 and resp.code == "INVALID_OUTBOX_CURSOR"


@pytest.mark.parametrize("limit", ["0", "-5", "2.0", "x", "00x"])
def test_bad_limit(api, limit):
    resp = api.outbox(limit=limit)
    assert resp.status == 400 and resp.code == "INVALID_OUTBOX_LIMIT"


def test_limit_default_clamp_and_empty_values(ctx, api):
    seed(ctx, api, [f"m{i:03d}" for i in range(120)])
    default = api.outbox(since="", limit="")  # empty = default
    assert len(default.data["entries"]) == 50 and default.data["hasMore"] is True
    clamped = api.outbox(limit="1000")
    assert len(clamped.data["entries"]) == 100 and clamped.data["cursor"] == 100
    huge = api.outbox(since="99999999999999999999")
    assert huge.status == 200 and huge.data == {"entries": [], "cursor": 99999999999999999999, "hasMore": False}


def test_paging_never_skips_or_repeats_while_rows_arrive(ctx, api):
    produced: list[str] = []
    seen: list[str] = []
    since = 0
    n = 0
    for round_ in range(12):
        batch = [f"r{round_}-{i}" for i in range(round_ % 4 + 1)]
        seed(ctx, api, batch)
        produced += batch
        n += 1
        resp = api.outbox(since=since, limit=3)
        assert resp.status == 200
        seen += ids_of(resp.data["entries"])
        assert resp.data["cursor"] >= since
        since = resp.data["cursor"]
        if round_ % 3 == 0 and seen:  # the client acks what it has; acking never disturbs the cursor
            api.outbox_ack(seen[-2:])
    rest, _ = api.outbox_sync(limit=3, since=since)
    seen += ids_of(rest)
    assert seen == produced  # in order, nothing skipped, nothing twice


@pytest.mark.dynamo_store  # reads the table's items
def test_append_retries_when_another_append_commits_in_between(ctx, api):
    """The counter compare-and-set inside the transaction: a writer that read a stale counter retries and
    gets the next id (real threads race on DynamoDB Local: tests/ddb_local/test_outbox_concurrency.py)."""
    store = ctx.outbox
    real_get = store.db.get
    injected = []

    def get_then_interleave(key, **kw):
        value = real_get(key, **kw)
        if key["SK"] == "SEQ#outbox" and not injected:
            injected.append(True)
            seed(ctx, api, ["sneaky"])  # commits id 2 after we read n = 1
        return value

    seed(ctx, api, ["first"])
    store.db.get = get_then_interleave
    try:
        assert seed(ctx, api, ["mine"]) == [3]
    finally:
        store.db.get = real_get
    entries, cursor = api.outbox_sync()
    assert [(e["id"], e["messageId"]) for e in entries] == [(1, "first"), (2, "sneaky"), (3, "mine")]
    assert cursor == 3


def test_undecryptable_rows_are_skipped_but_advance_the_cursor(ctx, api):
    seed(ctx, api, ["ok1"])
    ctx.outbox.append(api.user_id, [OutboxAppend("bad", "00:11:22", T0_MS, task_uuid=TASK)])
    other_key = "f" * 64
    ctx.outbox.append(
        api.user_id, [OutboxAppend("foreign", encrypt_for_storage("{}", other_key), T0_MS, task_uuid=TASK)]
    )
    seed(ctx, api, ["ok2"])
    page = api.outbox(limit=3).data
    assert ids_of(page["entries"]) == ["ok1"] and page["cursor"] == 3 and page["hasMore"] is True
    page = api.outbox(since=3).data
    assert ids_of(page["entries"]) == ["ok2"] and page["cursor"] == 4 and page["hasMore"] is False


@pytest.mark.dynamo_store  # reads the table's items
def test_large_payload_round_trips(ctx, api):
    big = "x" * 400_000  # its ciphertext is split across part items
    seed(ctx, api, ["big"], reasoningContent=big)
    entry = api.outbox().data["entries"][0]
    assert entry["push"]["reasoningContent"] == big
    assert api.outbox_delete({"messageIds": ["big"]}).data == {"deleted": 1}
    leftovers = list(ctx.outbox.db.query_prefix(f"U#{api.user_id}", "OP#"))
    assert leftovers == []


def test_other_users_rows_are_invisible(ctx, api):
    seed(ctx, api, ["mine"])
    from tests.support.inprocess import InProcessApi
    from tests.support.wire_client import WireClient

    other = WireClient(InProcessApi(), user_id="0b8c1a52-3e4f-4a6b-9c7d-2e1f0a9b8c7d")
    other.init()
    assert other.outbox().data["entries"] == []
    assert other.outbox_ack(["mine"]).data == {"acked": 0}
    assert other.outbox_delete({"all": True}).data == {"deleted": 0}
    assert ids_of(api.outbox().data["entries"]) == ["mine"]


# ---- retention (TTL) ------------------------------------------------------------------------------------------


def item(ctx, api, message_id):
    return ctx.outbox.db.get({"PK": f"U#{api.user_id}", "SK": f"O#{message_id}"})


@pytest.mark.dynamo_store  # reads the table's items
def test_rows_expire_28_days_after_creation(ctx, api):
    seed(ctx, api, ["old"])
    ctx.clock.advance(DAY)
    seed(ctx, api, ["young"])
    assert int(item(ctx, api, "old")["ttl"]) == (T0_MS + 28 * DAY) // 1000
    ctx.clock.advance(27 * DAY - 1000)
    assert ids_of(api.outbox().data["entries"]) == ["old", "young"]
    ctx.clock.advance(1000)
    page = api.outbox().data
    assert ids_of(page["entries"]) == ["young"] and page["cursor"] == 2
    # an expired row can neither be acked nor counted as deleted
    assert api.outbox_ack(["old"]).data == {"acked": 0}
    assert api.outbox_delete({"all": True}).data == {"deleted": 1}


@pytest.mark.dynamo_store  # reads the table's items
def test_ack_shortens_retention_to_seven_days(ctx, api):
    seed(ctx, api, ["early", "late"])
    ctx.clock.advance(DAY)
    assert api.outbox_ack(["early"]).data == {"acked": 1}
    early = item(ctx, api, "early")
    assert int(early["acked_at"]) == T0_MS + DAY and int(early["ttl"]) == (T0_MS + 8 * DAY) // 1000
    assert "ob_lsk" not in early
    ctx.clock.advance(24 * DAY)  # ack + 7 d would be later than creation + 28 d
    assert api.outbox_ack(["late"]).data == {"acked": 1}
    assert int(item(ctx, api, "late")["ttl"]) == (T0_MS + 28 * DAY) // 1000


# ---- ack ------------------------------------------------------------------------------------------------------


@pytest.mark.dynamo_store  # reads the table's items
def test_ack_is_idempotent_and_final(ctx, api):
    seed(ctx, api, ["a", "b", "c"])
    assert api.outbox_ack(["a", "b", "a", "missing"]).data == {"acked": 2}
    assert api.outbox_ack(["a", "b"]).data == {"acked": 0}
    assert ids_of(api.outbox().data["entries"]) == ["c"]
    # the engine retries the same occurrence: acked rows are never revived, unacked ones update in place
    ctx.outbox.mark_delivered(api.user_id, ["c"], T0_MS + 1)
    ctx.clock.advance(10)
    assert seed(ctx, api, ["a", "c"]) == [1, 3]
    entries = api.outbox().data["entries"]
    assert [(e["messageId"], e["id"], e["deliveredAt"], e["createdAt"]) for e in entries] == [
        ("c", 3, None, T0_MS + 10)
    ]
    assert int(item(ctx, api, "a")["acked_at"]) == T0_MS
    assert seed(ctx, api, ["d"]) == [4]  # ids keep growing


def test_reappend_in_batch_duplicates_collapse(ctx, api):
    key = ctx.user_key(api.user_id)
    rows = [
        OutboxAppend("dup", encrypt_for_storage(compact_json({"v": 1}), key), T0_MS, task_uuid=TASK),
        OutboxAppend("other", encrypt_for_storage(compact_json({"v": 2}), key), T0_MS, task_uuid=TASK),
        OutboxAppend("dup", encrypt_for_storage(compact_json({"v": 3}), key), T0_MS, task_uuid=TASK),
    ]
    assert ctx.outbox.append(api.user_id, rows) == [1, 2, 1]
    assert [e["push"] for e in api.outbox().data["entries"]] == [{"v": 3}, {"v": 2}]


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({}, "INVALID_OUTBOX_ACK"),
        ({"messageIds": []}, "INVALID_OUTBOX_ACK"),
        ({"messageIds": "a"}, "INVALID_OUTBOX_ACK"),
        ({"messageIds": ["a", 1]}, "INVALID_OUTBOX_ACK"),
        ({"messageIds": ["a", " \u3000"]}, "INVALID_OUTBOX_ACK"),
        ({"messageIds": [f"m{i}" for i in range(201)]}, "TOO_MANY_OUTBOX_ACK_IDS"),
    ],
)
def test_ack_validation(api, body, code):
    resp = api.send_encrypted("POST", "/outbox/ack", body)
    assert resp.status == 400 and resp.code == code
    if code == "TOO_MANY_OUTBOX_ACK_IDS":
        assert resp.body["error"]["details"] == {"count": 201}


def test_ack_accepts_200(ctx, api):
    seed(ctx, api, ["x"])
    assert api.outbox_ack(["x"] + [f"m{i}" for i in range(199)]).data == {"acked": 1}


def test_encrypted_body_gates(api):
    plain = api.request("POST", "/outbox/ack", body=json.dumps({"messageIds": ["a"]}))
    assert plain.code == "ENCRYPTION_REQUIRED"
    no_user = api.request("POST", "/outbox/ack", headers={"X-Payload-Encrypted": "true"}, body="{}", user=False)
    assert no_user.code == "USER_ID_REQUIRED"
    bad_version = api.request(
        "DELETE", "/outbox", headers={"X-Payload-Encrypted": "true", "X-Encryption-Version": "2"}, body="{}"
    )
    assert bad_version.code == "UNSUPPORTED_ENCRYPTION_VERSION"
    headers = {"X-Payload-Encrypted": "true", "X-Encryption-Version": "1"}
    assert api.request("POST", "/outbox/ack", headers=headers, body="[]").code == "INVALID_ENCRYPTED_PAYLOAD"
    from tests.support.wire_client import encrypt

    not_json = encrypt("x", api.user_key)  # encrypts json.dumps("x") → a JSON string, not an object
    resp = api.request("DELETE", "/outbox", headers=headers, body=json.dumps(not_json))
    assert resp.code == "INVALID_PAYLOAD_FORMAT"


def test_get_requires_user(api):
    assert api.request("GET", "/outbox", user=False).code == "USER_ID_REQUIRED"


# ---- delete ---------------------------------------------------------------------------------------------------


def test_delete_by_ids_regardless_of_state(ctx, api):
    seed(ctx, api, ["a", "b", "c", "d"])
    ctx.outbox.mark_delivered(api.user_id, ["a"], T0_MS)
    api.outbox_ack(["b"])
    assert api.outbox_delete({"messageIds": ["a", "b", "c", "c", "nope"]}).data == {"deleted": 3}
    assert ids_of(api.outbox().data["entries"]) == ["d"]
    assert seed(ctx, api, ["a"]) == [5]  # a deleted row comes back as a new row with a new id


def test_delete_all(ctx, api):
    seed(ctx, api, ["a", "b"])
    api.outbox_ack(["a"])
    assert api.outbox_delete({"all": True}).data == {"deleted": 2}
    assert api.outbox().data == {"entries": [], "cursor": 0, "hasMore": False}


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"all": True, "messageIds": ["a"]}, "INVALID_OUTBOX_DELETE"),
        ({}, "INVALID_OUTBOX_DELETE"),
        ({"all": False}, "INVALID_OUTBOX_DELETE"),
        ({"all": "true"}, "INVALID_OUTBOX_DELETE"),
        ({"messageIds": []}, "INVALID_OUTBOX_DELETE"),
        ({"messageIds": ["a", 42]}, "INVALID_OUTBOX_DELETE"),
        ({"messageIds": ["a", "  "]}, "INVALID_OUTBOX_DELETE"),
        ({"messageIds": [f"m{i}" for i in range(201)]}, "TOO_MANY_OUTBOX_DELETE_IDS"),
    ],
)
def test_delete_validation(ctx, api, body, code):
    seed(ctx, api, ["a"])
    resp = api.outbox_delete(body)
    assert resp.status == 400 and resp.code == code
    assert ids_of(api.outbox().data["entries"]) == ["a"]


def test_engine_methods(ctx, api):
    seed(ctx, api, ["t1", "t2", "t3"])
    seed(ctx, api, ["x1"], task_uuid=TASK + "#1")  # a uuid extending ours must not leak into our task's rows
    rows = ctx.outbox.list_for_task(api.user_id, TASK)
    assert [r.message_id for r in rows] == ["t1", "t2", "t3"]
    assert ctx.outbox.list_for_task(api.user_id, TASK, since_ms=T0_MS + 1) == []
    assert [r.message_id for r in ctx.outbox.list_for_task(api.user_id, TASK, limit=2)] == ["t1", "t2"]
    ctx.outbox.mark_delivered(api.user_id, ["t1"], T0_MS + 1)
    api.outbox_ack(["t2"])
    assert ctx.outbox.discard_undelivered(api.user_id, ["t1", "t2"]) == 0
    assert ctx.outbox.discard_undelivered_for_task(api.user_id, TASK) == 1  # only t3
    assert [r.message_id for r in ctx.outbox.list_for_task(api.user_id, TASK)] == ["t1", "t2"]
    assert [r.message_id for r in ctx.outbox.list_for_task(api.user_id, TASK + "#1")] == ["x1"]
    assert ctx.outbox.mark_delivered(api.user_id, ["nope"], T0_MS) == 0


def test_expired_rows_do_not_shorten_a_page(ctx, api):
    seed(ctx, api, [f"old{i}" for i in range(5)])
    ctx.clock.advance(20 * DAY)
    seed(ctx, api, ["y1", "y2", "y3"])
    ctx.clock.advance(8 * DAY)  # the first five are past retention; TTL has not removed them yet
    page = api.outbox(limit=2).data
    assert ids_of(page["entries"]) == ["y1", "y2"] and page["cursor"] == 7 and page["hasMore"] is True
    page = api.outbox(since=7, limit=2).data
    assert ids_of(page["entries"]) == ["y3"] and page["hasMore"] is False


def test_page_stops_before_the_response_size_limit(ctx, api, monkeypatch):
    from amsg.api import outbox as outbox_api

    monkeypatch.setattr(outbox_api, "MAX_PAGE_PLAINTEXT_BYTES", 3_000)
    seed(ctx, api, ["a", "b", "c"], filler="z" * 1_000)
    page = api.outbox().data
    assert ids_of(page["entries"]) == ["a", "b"] and page["cursor"] == 2 and page["hasMore"] is True
    page = api.outbox(since=2).data
    assert ids_of(page["entries"]) == ["c"] and page["cursor"] == 3 and page["hasMore"] is False
    monkeypatch.setattr(outbox_api, "MAX_PAGE_PLAINTEXT_BYTES", 10)
    page = api.outbox().data
    assert ids_of(page["entries"]) == ["a"]  # a page always carries at least one entry


@pytest.mark.dynamo_store  # schedules or claims a task: the task store has no fake
def test_claim_send_is_fenced_by_the_task_claim(ctx, api):
    from amsg.ports import NewTask

    due = 1_893_369_600_000  # 2029-12-31T00:00:00.000Z
    task = NewTask(api.user_id, TASK, "00:00:00", "fixed", due, due)
    ctx.tasks.create_task(task)
    seed(ctx, api, ["p1", "p2"])
    claimed = ctx.claims.claim(
        api.user_id, TASK, expected_next_send_at_ms=due, now_ms=T0_MS, lease_until_ms=T0_MS + 90_000, owner="t"
    )
    assert claimed is not None and claimed.claim_version == 1
    claim = dict(task_uuid=TASK, claim_version=1, now_ms=T0_MS)
    assert ctx.outbox.claim_send(api.user_id, "p1", **claim) is True
    assert ctx.outbox.claim_send(api.user_id, "p1", **claim) is False  # taken: never pushed twice
    assert ctx.outbox.list_for_task(api.user_id, TASK)[0].sending_at == T0_MS
    ctx.outbox.release_send(api.user_id, "p1")  # the push failed: a retry may send it
    assert ctx.outbox.claim_send(api.user_id, "p1", **claim) is True
    assert ctx.outbox.claim_send(api.user_id, "p2", **{**claim, "claim_version": 2}) is False  # not our claim
    assert ctx.outbox.claim_send(api.user_id, "p2", **{**claim, "now_ms": T0_MS + 90_000}) is False  # lease over
    assert ctx.outbox.claim_send(api.user_id, "nope", **claim) is False
    ctx.outbox.mark_delivered(api.user_id, ["p2"], T0_MS)
    assert ctx.outbox.claim_send(api.user_id, "p2", **claim) is False  # already delivered
    ctx.outbox.release_send(api.user_id, "nope")  # no row: nothing happens
