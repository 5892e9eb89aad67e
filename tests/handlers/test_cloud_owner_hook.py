"""The host's ``resolve_owner`` hook in the cloud-data inventory (moto, real handler): it is consulted last,
after the stored ownership record and the payload's owner fields; what it attributes shows in the inventory and
is cleaned up by a retirement of that owner; it never sees a secret; a hook that raises makes the inventory
incomplete (``OWNER_RESOLUTION_FAILED``) so no cleanup starts on a partial picture."""

from __future__ import annotations

import json

import pytest

from tests.conftest import T0_MS
from tests.handlers.test_cloud_data import ALICE, err, get, post
from tests.support import hooks_owner
from tests.support.wire_client import dummy_subscription

FIRST = "2029-12-31T00:01:00.000Z"
SECRET = "sk-secret-key-0123"


@pytest.fixture
def hooked(ctx):
    settings = ctx.settings
    ctx.settings = type(settings)(**{**settings.__dict__, "hooks_module": "tests.support.hooks_owner"})
    hooks_owner.CALLS.clear()
    return ctx


def schedule(api, **fields) -> str:
    payload = {"contactName": "Rei", "messageType": "fixed", "userMessage": "secret text", "firstSendTime": FIRST}
    resp = api.schedule({**payload, **fields})
    assert resp.status == 201, resp.text
    return resp.data["uuid"]


def seed(api) -> dict[str, str]:
    assert api.put_subscription(dummy_subscription()).status == 200
    uuids = {
        "ext": schedule(api, metadata={"app": "ext"}),
        "alice": schedule(api, owner=ALICE, metadata={"app": "ext"}),
    }
    uuids["plain"] = schedule(api)
    state = [
        {"namespace": "hooked", "key": "k", "value": "v", "updatedAt": T0_MS - 1},
        {"namespace": "hooked", "key": "a", "value": "v", "updatedAt": T0_MS - 1, "owner": ALICE},
        {"namespace": "plain", "key": "k", "value": "v", "updatedAt": T0_MS - 1},
    ]
    assert api.put_client_state(state).status == 200
    value = {"apiUrl": "https://llm.example/v1", "apiKey": SECRET, "primaryModel": "m"}
    assert (
        api.put_credentials([{"credId": "ext/chat", "value": value}, {"credId": "own/chat", "value": value}]).status
        == 200
    )
    return uuids


def owners(api) -> dict[str, tuple]:
    page = get(api, "resources?limit=200").data
    return {r["label"]: (r["owner"] and (r["owner"]["type"], r["owner"]["id"]), r["kind"]) for r in page["resources"]}


def test_the_hook_is_consulted_last_and_never_sees_a_secret(api, hooked):
    uuids = seed(api)
    found = owners(api)
    assert found["ext/chat"] == (("app", "ext"), "hooked")
    assert found["hooked/k"] == (("app", "ext"), "hooked")
    assert found[uuids["ext"]] == (("app", "ext"), "hooked")
    # a stored owner (the write's ownership record, the task's owner) wins over the hook
    assert found["hooked/a"][0] == ("character", "alice")
    assert found[uuids["alice"]][0] == ("character", "alice")
    assert found["own/chat"] == (None, None) and found["plain/k"] == (None, None)
    assert found[uuids["plain"]] == (None, None)
    # asked about every resource, with the reference's input shape, and nothing secret in it
    assert {c["type"] for c in hooks_owner.CALLS} >= {"task", "state", "credential", "subscription"}
    assert all(set(c) == {"type", "namespace", "key", "credId", "value", "payload", "task", "tasks"}
               for c in hooks_owner.CALLS)  # fmt: skip
    assert all(c["value"] is None for c in hooks_owner.CALLS)
    text = json.dumps(hooks_owner.CALLS, default=str)
    assert SECRET not in text and "apiKey" not in text and "pushSubscription" not in text
    assert sorted(t["uuid"] for t in hooks_owner.CALLS[-1]["tasks"]) == sorted(uuids.values())
    # the owner filter sees what the hook attributed
    page = get(api, "resources?ownerType=app&ownerId=ext").data
    assert sorted(r["label"] for r in page["resources"]) == sorted(["ext/chat", "hooked/k", uuids["ext"]])


def test_retiring_an_owner_the_hook_names_deletes_what_it_attributes(api, hooked):
    uuids = seed(api)
    owner = {"type": "app", "id": "ext"}
    plan = post(api, "cleanup-plans", {"mode": "retire-owner", "owner": owner}).data
    assert plan["count"] == 3
    op = post(api, "cleanup-operations", {"planId": plan["id"], "idempotencyKey": "ext"}).data
    assert op["status"] == "completed"
    assert sum(c["deleted"] for c in op["counts"]) == 3
    left = owners(api)
    assert "ext/chat" not in left and "hooked/k" not in left and uuids["ext"] not in left
    assert {"own/chat", "plain/k", "hooked/a", uuids["alice"], uuids["plain"]} <= set(left)


def test_a_failing_hook_makes_the_inventory_incomplete(api, hooked):
    seed(api)
    schedule(api, metadata={"explode": True})
    summary = get(api, "summary").data
    assert summary["complete"] is False
    assert summary["gaps"] == [
        {"source": "task", "code": "OWNER_RESOLUTION_FAILED", "message": "A resource owner could not be resolved"}
    ]
    assert summary["total"] == 10  # the resource is still listed (4 tasks, 3 state, 2 credentials, 1 subscription)
    err(post(api, "cleanup-plans", {"mode": "retire-owner", "owner": ALICE}), 409, "CLOUD_INVENTORY_INCOMPLETE")


def test_without_the_hook_nothing_is_attributed_by_it(api, ctx):
    uuids = seed(api)
    found = owners(api)
    assert found["ext/chat"] == (None, None) and found[uuids["ext"]] == (None, None)
