import pytest

from tests.support.wire_client import dummy_subscription

pytestmark = pytest.mark.memory_store  # a round trip through the routes: the in-memory fakes are enough


def test_fixed_task_round_trip(api):
    assert (
        api.schedule(
            {
                "contactName": "Rei",
                "messageType": "fixed",
                "userMessage": "hi",
                "firstSendTime": "2030-01-01T00:00:00.000Z",
            }
        ).code
        == "PUSH_SUBSCRIPTION_MISSING"
    )
    assert api.put_subscription(dummy_subscription()).status == 200
    resp = api.schedule(
        {"contactName": "Rei", "messageType": "fixed", "userMessage": "hi", "firstSendTime": "2030-01-01T00:00:00.000Z"}
    )
    assert resp.status == 201, resp.text
    uuid = resp.data["uuid"]
    assert resp.data["id"] == 1
    listed = api.list_messages()
    assert listed.status == 200, listed.text
    assert listed.data["tasks"][0]["uuid"] == uuid
    single = api.get_message(uuid)
    assert single.data["task"]["metadata"] == {}
    upd = api.update(uuid, {"userMessage": "bye", "nextSendAt": "2030-01-02T00:00:00Z"})
    assert upd.status == 200, upd.text
    assert upd.data["updatedFields"] == ["userMessage", "nextSendAt"]
    assert api.cancel(uuid).status == 200
    assert api.cancel(uuid).code == "TASK_NOT_FOUND"
