"""The failing push service (tests/support/push_faults.py on the loopback fake) seen by the real Web Push
sender: each fault answers as a push service does, and every push is recorded by message id, accepted or not."""

from __future__ import annotations

import json

import httpx
import pytest
from amsg.adapters.webpush_sender import WebPushSender
from amsg.failures import PushSendError
from amsg.vapid import generate_vapid_keys

from tests.support.fake_push import FakePushService
from tests.support.push_faults import PushFaultPlan


@pytest.fixture
def world():
    public, private = generate_vapid_keys()
    with (
        FakePushService(vapid_public_key=public) as push,
        WebPushSender(private, public, "ops@example.com", timeout_s=0.5) as sender,
    ):
        yield push, sender


def _send(sender: WebPushSender, push: FakePushService, message_id: str) -> PushSendError | None:
    subscription = push.subscribe()
    body = json.dumps({"taskUuid": "t", "messageId": message_id}).encode()
    try:
        sender.send(subscription.to_json(), body)
    except PushSendError as exc:
        return exc
    return None


def test_a_late_201_is_accepted_by_the_service_and_unconfirmed_for_the_sender(world):
    push, sender = world
    push.faults = PushFaultPlan(slow_accept=1.0, slow_s=1.0)
    error = _send(sender, push, "m_0")
    assert error is not None and error.unconfirmed
    assert push.accepted_counts() == {"t/m_0": 1}  # the push went out: sending it again would be a duplicate


def test_a_hang_is_unconfirmed_and_not_accepted(world):
    push, sender = world
    push.faults = PushFaultPlan(hang=1.0, hang_s=1.0)
    error = _send(sender, push, "m_0")
    assert error is not None and error.unconfirmed
    assert push.accepted_counts() == {} and len(push.received) == 1


@pytest.mark.parametrize(("kind", "statuses"), [("rate_limited", {429}), ("server_error", {500, 502, 503})])
def test_refusals_answer_their_status(world, kind, statuses):
    push, sender = world
    push.faults = PushFaultPlan(**{kind: 1.0})
    seen = {_send(sender, push, f"m_{i}").status for i in range(3)}
    assert seen == statuses
    assert push.accepted_counts() == {}


def test_429_carries_retry_after_and_a_gone_subscription_answers_410_to_every_push(world):
    push, _ = world
    push.strict = False
    push.faults = PushFaultPlan(rate_limited=1.0, retry_after_s=7)
    answer = httpx.post(push.endpoint(push.subscribe().endpoint_id), content=b"x")
    assert (answer.status_code, answer.headers["retry-after"]) == (429, "7")
    push.faults = PushFaultPlan(gone=1.0)
    endpoint = push.endpoint(push.subscribe().endpoint_id)
    assert [httpx.post(endpoint, content=b"x").status_code for _ in range(2)] == [410, 410]


def test_the_draws_follow_the_seed():
    first, second = PushFaultPlan(hang=0.3, gone=0.2, seed=5), PushFaultPlan(hang=0.3, gone=0.2, seed=5)
    assert [first.is_gone(f"e{i}") for i in range(30)] == [second.is_gone(f"e{i}") for i in range(30)]
    assert first.is_gone("e3") == first.is_gone("e3")  # drawn once per endpoint
