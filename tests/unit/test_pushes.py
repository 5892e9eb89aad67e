from amsg.engine.pushes import Occurrence, content_pushes, measure_push_payload, should_push
from amsg.failures import NonRetryableError


def test_measure_push_payload_with_and_without_the_envelope_reserve():
    assert measure_push_payload("x" * 3993) == {
        "bytes": 3993,
        "maxBytes": 3993,
        "remainingBytes": 0,
        "withinLimit": True,
        "envelopeReservedBytes": 0,
    }
    reserved = measure_push_payload("名" * 1200, reserve_envelope=True)
    assert reserved == {
        "bytes": 3600,
        "maxBytes": 3609,
        "remainingBytes": 9,
        "withinLimit": True,
        "envelopeReservedBytes": 384,
    }
    assert measure_push_payload("x" * 3994)["withinLimit"] is False


def test_ids_are_deterministic_per_occurrence():
    occ = Occurrence(42, "u", 1780304400000)
    assert occ.session_id == "sess_task_42@1780304400000"
    assert occ.message_id(0) == "msg_task_42@1780304400000_0"
    assert occ.message_id("reasoning") == "msg_task_42@1780304400000_reasoning"
    assert Occurrence(7, "u", None).message_id(1) == "msg_task_7_1"


def test_push_policy_with_an_outbox():
    pushes = content_pushes({"messageType": "fixed", "contactName": "R"}, Occurrence(1, "u", 0), ["a"], 0)
    assert should_push(pushes[0], outboxed=True)
    assert not should_push({"messageKind": "reasoning"}, outboxed=True)
    assert should_push({"messageKind": "reasoning"}, outboxed=False)
    assert should_push({"messageKind": "error", "notification": {"show": "always"}}, outboxed=True)
    assert not should_push({"messageKind": "content", "notification": {"show": False}}, outboxed=True)


def test_non_retryable_error_is_permanent():
    error = NonRetryableError("nope", code="HOST_SAID_NO")
    assert error.permanent is True and error.code == "HOST_SAID_NO"
