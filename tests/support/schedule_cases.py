"""Schedule requests for the validation tests: a fixed and a prompted request, and the validator's error."""

import pytest
from amsg.domain.validation import validate_schedule_payload
from amsg.errors import ApiError
from amsg.timeutil import parse_iso_ms

NOW = parse_iso_ms("2030-01-01T00:00:00.000Z")
FUTURE = "2030-01-02T00:00:00.000Z"
FUTURE_MS = parse_iso_ms(FUTURE)
UUID_A = "11111111-1111-4111-8111-111111111111"
UUID_B = "22222222-2222-1222-9222-222222222222"
DEFAULT_MSG = "缺少必需参数或参数格式错误"
ALLOWED = ["fixed", "prompted", "auto", "instant"]
INLINE = {"apiUrl": "https://llm.example/v1", "apiKey": "sk-x", "primaryModel": "m"}


def fixed(**extra):
    return {"contactName": "Rei", "messageType": "fixed", "firstSendTime": FUTURE, "userMessage": "hi", **extra}


def prompted(**extra):
    return {"contactName": "Rei", "messageType": "prompted", "firstSendTime": FUTURE, "completePrompt": "p", **extra}


def validate(payload, now=NOW):
    return validate_schedule_payload(payload, now_ms=now, new_uuid=lambda: UUID_A)


def error_of(payload, now=NOW) -> ApiError:
    with pytest.raises(ApiError) as info:
        validate(payload, now)
    return info.value


def assert_error(payload, code, details, message=None, status=400):
    err = error_of(payload)
    assert (err.status, err.code, err.details) == (status, code, details)
    if message is not None:
        assert err.message == message
    return err


def instant(**extra):
    return {"contactName": "R", "messageType": "instant", "firstSendTime": FUTURE, **extra}
