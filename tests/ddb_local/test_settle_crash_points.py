"""The settlement of a delivered task is three conditional writes, not a transaction (docs/decisions.md, 38): the
pushed rows' delivered marks, the fenced task write, a one-shot's uuid registry entry. On DynamoDB Local, each
crash point in between is left in a state the next run (or create) already handles: nothing is pushed twice and
the uuid is not lost."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from amsg.crypto import compact_json, encrypt_for_storage
from amsg.engine.messages import parse_task_message
from amsg.engine.run_task import run_message
from amsg.engine.tick import run_tick
from amsg.errors import TaskUuidConflict
from amsg.ports import NewTask

from tests.support.ddb_engine import T0_MS, MemoryQueue, RecordingPushSender, ddb_context, with_fakes
from tests.support.ddb_limits import table_clients

pytestmark = pytest.mark.ddb_local
DUE_MS = T0_MS + 60_000


class FailDeletes:
    """Answers 500 (through every SDK retry) to each ``DeleteItem`` whose key matches, and to each
    ``BatchExecuteStatement`` with a ``DELETE`` of such a key (its key is its first two parameters): a sandbox
    that died there."""

    def __init__(self, matches: Any) -> None:
        self.matches, self.failed = matches, 0

    def _deletes(self, target: str, body: dict[str, Any]) -> list[dict[str, Any]]:
        if target.endswith(".DeleteItem"):
            return [body["Key"]]
        if target.endswith(".BatchExecuteStatement"):
            return [
                {"PK": s["Parameters"][0], "SK": s["Parameters"][1]}
                for s in body["Statements"]
                if s["Statement"].startswith("DELETE")
            ]
        return []

    def __call__(self, request: Any, **kwargs: Any) -> Any:
        target = request.headers.get("X-Amz-Target", b"")
        target = target.decode() if isinstance(target, bytes) else target
        if not any(self.matches(key) for key in self._deletes(target, json.loads(request.body or b"{}"))):
            return None
        self.failed += 1
        return internal_error(request, "down")


def internal_error(request: Any, message: str) -> Any:
    """DynamoDB's 500 answer to ``request`` (what botocore retries, then raises)."""
    from botocore.awsrequest import AWSResponse

    body = json.dumps({"__type": "com.amazonaws.dynamodb.v20120810#InternalServerError", "message": message})

    class Raw:
        def stream(self, **_: Any) -> Any:
            yield body.encode()

    return AWSResponse(request.url, 500, {"x-amzn-requestid": "f"}, Raw())


def _new_task(ctx: Any, user: str, task_uuid: str, message: str) -> NewTask:
    payload = {"contactName": "Rei", "messageType": "fixed", "userMessage": message, "metadata": {}}
    encrypted = encrypt_for_storage(compact_json(payload), ctx.user_key(user))
    return NewTask(user, task_uuid, encrypted, "fixed", DUE_MS, T0_MS)


def _one_shot(ctx: Any, message: str) -> tuple[str, str]:
    user, task_uuid = str(uuid.uuid4()), str(uuid.uuid4())
    sub = {"endpoint": "https://push.invalid/x", "keys": {}}
    ctx.subscriptions.put_push_subscription(user, encrypt_for_storage(compact_json(sub), ctx.user_key(user)), 1)
    ctx.tasks.create_task(_new_task(ctx, user, task_uuid, message))
    return user, task_uuid


def _tick_and_run(ctx: Any, queue: MemoryQueue) -> None:
    run_tick(ctx)
    while not queue.items.empty():
        message = parse_task_message(json.dumps(queue.items.get_nowait()))
        run_message(ctx, message, remaining_ms=lambda: 100_000, owner="c")


def _wired(
    endpoint: str, table: str, failing: FailDeletes, statements: str
) -> tuple[Any, RecordingPushSender, MemoryQueue]:
    ctx = ddb_context(endpoint, table, AMSG_DYNAMO_STATEMENTS=statements)
    sender, queue = RecordingPushSender(), MemoryQueue()
    with_fakes(ctx, sender, queue)
    for client in table_clients(ctx.tasks.db):
        client.meta.events.register("before-send.dynamodb", failing)
    return ctx, sender, queue


# both forms of the single writes: statements (the default) and one UpdateItem / DeleteItem each
BOTH_FORMS = pytest.mark.parametrize("statements", ["on", "off"])


@BOTH_FORMS
def test_died_after_the_delivered_marks_the_next_claim_settles_without_pushing(
    ddb_local_endpoint, ddb_local_table, statements
):
    failing = FailDeletes(lambda key: key["SK"]["S"].startswith("T#"))  # the task's delete never lands
    ctx, sender, queue = _wired(ddb_local_endpoint, ddb_local_table, failing, statements)
    user, task_uuid = _one_shot(ctx, "甲。乙。")
    ctx.clock.current_ms = T0_MS + 61_000
    _tick_and_run(ctx, queue)
    assert [p["message"] for p in sender.sent] == ["甲。", "乙。"] and failing.failed > 0
    rows = ctx.outbox.list_unacked(user, 0, 10, ctx.now_ms())
    assert [r.delivered_at is not None for r in rows] == [True, True]  # the marks came first
    assert ctx.tasks.find_task(task_uuid).status == "pending"  # still under the dead run's claim

    failing.matches = lambda key: False  # the outage ends; the lease runs out and a later tick claims it again
    for _ in range(2):
        ctx.clock.advance(10 * 60_000)
        _tick_and_run(ctx, queue)
    assert [p["message"] for p in sender.sent] == ["甲。", "乙。"]  # nothing pushed again
    assert ctx.tasks.find_task(task_uuid) is None


@BOTH_FORMS
def test_died_after_the_task_delete_the_uuid_is_free_again(ddb_local_endpoint, ddb_local_table, statements):
    failing = FailDeletes(lambda key: key["PK"]["S"].startswith("TU#"))  # the registry entry's delete never lands
    ctx, sender, queue = _wired(ddb_local_endpoint, ddb_local_table, failing, statements)
    user, task_uuid = _one_shot(ctx, "一。")
    ctx.clock.current_ms = T0_MS + 61_000
    _tick_and_run(ctx, queue)
    assert [p["message"] for p in sender.sent] == ["一。"] and failing.failed > 0
    assert ctx.tasks.find_task(task_uuid) is None  # the entry is left, naming a task that is gone
    assert ctx.tasks.db.get(ctx.tasks.space.uuid_registry_key(task_uuid)) is not None

    other = str(uuid.uuid4())  # any user may take the uuid over, as if the entry had gone with the task
    ctx.tasks.create_task(_new_task(ctx, other, task_uuid, "二。"))
    entry = ctx.tasks.db.get(ctx.tasks.space.uuid_registry_key(task_uuid))
    assert entry["user_id"] == other and ctx.tasks.find_task(task_uuid).user_id == other
    with pytest.raises(TaskUuidConflict):  # while it names a task that exists, the uuid is taken
        ctx.tasks.create_task(_new_task(ctx, user, task_uuid, "三。"))


# ---- a delivered one-shot whose task is gone at its delete (docs/decisions.md, 43) ------------------------


class CancelAtLastPush(RecordingPushSender):
    """Accepts every push; once the last one has left, the user cancels the task (``DELETE /cancel-message``'s
    store calls) before the run's settlement."""

    def __init__(self, ctx: Any, last: str) -> None:
        super().__init__()
        self.ctx, self.last, self.cancelled = ctx, last, False

    def send(self, subscription: Any, payload: bytes | str, **kwargs: Any) -> int:
        status = super().send(subscription, payload, **kwargs)
        if json.loads(payload)["messageId"].endswith(self.last) and not self.cancelled:
            user, task_uuid = self.task
            deleted = self.ctx.tasks.delete_task(user, task_uuid)  # what the API's cancel does
            self.cancelled = deleted is not None
            named = deleted.outbox_message_ids if deleted is not None else ()
            self.ctx.outbox.discard_undelivered_for_task(user, task_uuid, named=named)
        return status


def _items_of(ctx: Any, user: str, task_uuid: str) -> list[dict[str, Any]]:
    """Every item left of the user's task: the user's partition but its outbox rows and subscription, and the
    task's uuid registry entry."""
    space = ctx.tasks.space
    pk = space.user_pk(user)
    left = [
        item
        for item in ctx.tasks.db.query_all(KeyConditionExpression="PK = :pk", ExpressionAttributeValues={":pk": pk})
        if not str(item["SK"]).startswith(("O#", "PUSH", "SEQ#"))
    ]
    entry = ctx.tasks.db.get(space.uuid_registry_key(task_uuid))
    return left + ([entry] if entry else [])


@BOTH_FORMS
def test_a_cancel_after_the_pushes_reads_as_delivered_and_leaves_nothing(
    ddb_local_endpoint, ddb_local_table, statements
):
    ctx = ddb_context(ddb_local_endpoint, ddb_local_table, AMSG_DYNAMO_STATEMENTS=statements)
    queue = MemoryQueue()
    sender = CancelAtLastPush(ctx, last="_1")
    with_fakes(ctx, sender, queue)
    user, task_uuid = _one_shot(ctx, "甲。乙。")
    sender.task = (user, task_uuid)
    ctx.clock.current_ms = T0_MS + 61_000
    run_tick(ctx)
    message = parse_task_message(json.dumps(queue.items.get_nowait()))
    result = run_message(ctx, message, remaining_ms=lambda: 100_000, owner="c")
    assert sender.cancelled and [p["message"] for p in sender.sent] == ["甲。", "乙。"]
    details = result["details"]
    assert result["successCount"] == 1 and not details["cancelledTasks"] and not details["failedTasks"]
    rows = ctx.outbox.list_unacked(user, 0, 10, ctx.now_ms())
    assert rows and all(r.delivered_at is not None for r in rows)  # what the cancel left is marked delivered
    assert _items_of(ctx, user, task_uuid) == []  # no task, no part, no registry entry left


class LoseTaskDeleteAnswer:
    """The task's delete is applied by DynamoDB Local, then its answer is lost (a 500 in its place): the SDK sends
    it again and finds the task gone."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint, self.lost = endpoint, 0

    def __call__(self, request: Any, **kwargs: Any) -> Any:
        import urllib.request

        target = request.headers.get("X-Amz-Target", b"")
        target = target.decode() if isinstance(target, bytes) else target
        deletes = FailDeletes(lambda key: key["SK"]["S"].startswith("T#"))._deletes(
            target, json.loads(request.body or b"{}")
        )
        if self.lost or not any(key["SK"]["S"].startswith("T#") for key in deletes):
            return None
        headers = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in request.headers.items()}
        forwarded = urllib.request.Request(self.endpoint, data=request.body, headers=headers, method="POST")
        with urllib.request.urlopen(forwarded, timeout=10) as answer:  # applied
            assert answer.status == 200
        self.lost += 1
        return internal_error(request, "lost")


@BOTH_FORMS
def test_the_task_deletes_answer_lost_after_it_applied_reads_as_delivered(
    ddb_local_endpoint, ddb_local_table, statements
):
    ctx = ddb_context(ddb_local_endpoint, ddb_local_table, AMSG_DYNAMO_STATEMENTS=statements)
    sender, queue = RecordingPushSender(), MemoryQueue()
    with_fakes(ctx, sender, queue)
    losing = LoseTaskDeleteAnswer(ddb_local_endpoint)
    for client in table_clients(ctx.tasks.db):
        client.meta.events.register("before-send.dynamodb", losing)
    user, task_uuid = _one_shot(ctx, "一。")
    ctx.clock.current_ms = T0_MS + 61_000
    run_tick(ctx)
    message = parse_task_message(json.dumps(queue.items.get_nowait()))
    result = run_message(ctx, message, remaining_ms=lambda: 100_000, owner="c")
    assert losing.lost == 1 and [p["message"] for p in sender.sent] == ["一。"]
    details = result["details"]
    assert result["successCount"] == 1 and not details["cancelledTasks"] and not details["failedTasks"]
    assert _items_of(ctx, user, task_uuid) == []
