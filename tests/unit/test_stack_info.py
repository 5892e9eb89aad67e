"""``GET /_local/environment`` hands out where the stack keeps its data, never a secret (stack_info.py)."""

from __future__ import annotations

import json

from amsg_local.stack_info import PUBLIC_KEYS, describe, master_key_fingerprint

SECRETS = {
    "AMSG_MASTER_KEY": "a" * 64,
    "AMSG_VAPID_PRIVATE_KEY": "vapid-private-key-value",
    "AMSG_CLIENT_TOKEN": "client-token-value",
    "AMSG_TENANT_TOKEN_SIGNING_KEY": "signing-key-value",
    "AMSG_INIT_SECRET": "init-secret-value",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-value",
    "AWS_SESSION_TOKEN": "aws-session-value",
}


def test_no_secret_leaves_and_the_public_part_does() -> None:
    public = {key: f"value-of-{key}" for key in PUBLIC_KEYS}
    answer = describe({**SECRETS, **public, "PATH": "/usr/bin"}, dead_letter_url="http://q/dlq")
    text = json.dumps(answer)
    for value in SECRETS.values():
        assert value not in text
    assert answer["environment"] == public
    assert answer["masterKeyFingerprint"] == master_key_fingerprint("a" * 64) != "a" * 16
    assert answer["deadLetterQueueUrl"] == "http://q/dlq"
    assert answer["clockOffsetMs"] is None


def test_a_stack_without_a_master_key_has_no_fingerprint() -> None:
    class Clock:
        offset_ms = 42

    answer = describe({"AMSG_TABLE_NAME": "t"}, clock=Clock())
    assert answer["masterKeyFingerprint"] is None and answer["clockOffsetMs"] == 42
