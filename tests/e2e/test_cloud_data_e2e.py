"""Retiring a cloud-data owner end to end over real HTTP: the local stack (gateway → real handlers → DynamoDB →
tick → SQS → run_task) with its offset clock, a loopback push service that decrypts every push, and an
independent wire client. Two owners schedule tasks and write state and credentials; retiring one stops its
pending tasks, refuses its writes with 409 and deletes its data, and leaves the other untouched; a restore lets
it write again at the new generation."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from amsg.timeutil import iso_from_ms
from amsg.vapid import generate_vapid_keys
from amsg_local.cli import start_local_stack

from tests.support.fake_push import FakePushService
from tests.support.wire_client import WireClient, http_transport

pytestmark = pytest.mark.e2e
MINUTE = 60_000
ALICE = {"type": "character", "id": "alice", "label": "Alice"}
BOB = {"type": "character", "id": "bob", "label": "Bob"}


@pytest.fixture(scope="module")
def world() -> Iterator[dict]:
    public, private = generate_vapid_keys()
    with FakePushService(vapid_public_key=public) as push:
        config = {
            "AMSG_MASTER_KEY": "e" * 64,
            "AMSG_VAPID_PUBLIC_KEY": public,
            "AMSG_VAPID_PRIVATE_KEY": private,
            "AMSG_VAPID_EMAIL": "e2e@example.test",
            "AMSG_PUSH_PACING_MS": "0",
        }
        with start_local_stack(config=config) as stack:
            yield {"stack": stack, "push": push}


def test_retire_one_owner_of_two_then_restore(world):
    stack, push = world["stack"], world["push"]
    user = WireClient(http_transport(stack.base_url), str(uuid.uuid4()))
    user.init()
    subscription = push.subscribe()
    assert user.put_subscription(subscription.to_json()).status == 200
    now = stack.post_local("/_local/clock", {"reset": True})["nowMs"]

    def schedule(owner: dict, text: str, at_ms: int, **extra) -> dict:
        payload = {"contactName": "Rei", "messageType": "fixed", "userMessage": text,
                   "firstSendTime": iso_from_ms(at_ms), "owner": owner, **extra}  # fmt: skip
        resp = user.schedule(payload)
        assert resp.status == 201, resp.text
        return resp.data

    def cloud_post(path: str, body: dict):
        return user.send_encrypted("POST", f"/cloud-data/{path}", body)

    for owner in (ALICE, BOB):
        schedule(owner, f"{owner['id']} soon", now + 2 * MINUTE)
        schedule(owner, f"{owner['id']} later", now + 10 * MINUTE)
        state = [{"namespace": "chat", "key": owner["id"], "value": "ctx", "updatedAt": now - 1, "owner": owner}]
        assert user.put_client_state(state).status == 200
        cred = {"apiUrl": "https://llm.example/v1", "apiKey": "sk-e2e", "primaryModel": "m"}
        assert user.put_credentials([{"credId": f"{owner['id']}/chat", "value": cred, "owner": owner}]).status == 200

    stack.post_local("/_local/clock", {"nowMs": now + 2 * MINUTE + 5_000})
    stack.post_local("/_local/tick")
    assert sorted(p["message"] for p in push.payloads(subscription.endpoint_id)) == ["alice soon", "bob soon"]

    plan = cloud_post("cleanup-plans", {"mode": "retire-owner", "owner": ALICE})
    assert plan.status == 200, plan.text
    op = cloud_post("cleanup-operations", {"planId": plan.data["id"], "idempotencyKey": "retire-alice-1"})
    assert op.status == 200 and op.data["status"] == "completed", op.text

    # its pending task never fires; the other owner's does
    stack.post_local("/_local/clock", {"nowMs": now + 10 * MINUTE + 5_000})
    stack.post_local("/_local/tick")
    assert sorted(p["message"] for p in push.payloads(subscription.endpoint_id)) == [
        "alice soon", "bob later", "bob soon",
    ]  # fmt: skip
    # its writes are refused, its data is gone, the other owner's is untouched
    refused = user.put_client_state(
        [{"namespace": "chat", "key": "alice", "value": "x", "updatedAt": now, "owner": ALICE}]
    )
    assert refused.status == 409 and refused.body["error"]["code"] == "CLOUD_OWNER_RETIRED"
    resources = user.request("GET", "/cloud-data/resources").data["resources"]
    owners = {(r["owner"] or {}).get("id") for r in resources}
    assert "alice" not in owners and "bob" in owners
    assert [r["owner"]["id"] for r in resources if r["type"] == "credential"] == ["bob"]
    owner_state = user.request("GET", "/cloud-data/owner?ownerType=character&ownerId=alice").data
    assert owner_state["retired"] is True and owner_state["generation"] == 1

    # restore: writes at the new generation work again
    restored = cloud_post("owner", {"action": "restore", "owner": ALICE})
    assert restored.status == 200 and restored.data["generation"] == 2
    again = schedule(ALICE, "alice back", now + 12 * MINUTE, ownerGeneration=2)
    stack.post_local("/_local/clock", {"nowMs": now + 12 * MINUTE + 5_000})
    stack.post_local("/_local/tick")
    assert "alice back" in [p["message"] for p in push.payloads(subscription.endpoint_id)]
    assert again["uuid"]
