"""``GET /_local/environment``: where a running local stack keeps its data, for ``amsg invoke`` and ``amsg status``.

A command that works against a running ``amsg local`` needs the stack's endpoints (DynamoDB, the in-memory
SQS, the multi-tenant line's KMS), its table and queue names and its clock. The route hands those over, never
a secret: a page on another origin cannot read the answer (no CORS header), yet a loopback port is reachable
by any local process, so the master key travels only as its fingerprint and the commands read the secrets
from the ``.env`` that ``amsg local`` saved them to (``--save-keys``, its default). A fingerprint that differs
from the ``.env``'s key is reported instead of encrypting under the wrong key.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

__all__ = [
    "DEFAULT_STACK_URL",
    "ENVIRONMENT_PATH",
    "PUBLIC_KEYS",
    "StackUnreachable",
    "describe",
    "fetch",
    "master_key_fingerprint",
]

ENVIRONMENT_PATH = "/_local/environment"
DEFAULT_STACK_URL = "http://127.0.0.1:3000"

# The stack's variables that are no secret: endpoints, names, public keys and knobs.
PUBLIC_KEYS = (
    "AWS_ENDPOINT_URL_DYNAMODB",
    "AWS_ENDPOINT_URL_SQS",
    "AWS_ENDPOINT_URL_KMS",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AMSG_TABLE_NAME",
    "AMSG_QUEUE_URL",
    "AMSG_TENANCY",
    "AMSG_KMS_KEY_ID",
    "AMSG_PUBLIC_BASE_URL",
    "AMSG_VAPID_PUBLIC_KEY",
    "AMSG_VAPID_EMAIL",
    "AMSG_DUE_SHARDS",
)


class StackUnreachable(RuntimeError):
    """No local stack answers at the URL (``str(exc)`` says what to do)."""


def master_key_fingerprint(master_key: str) -> str:
    """The fingerprint tenant records carry (never the key)."""
    from amsg.tenancy.keys import master_key_fingerprint as fingerprint

    return fingerprint(master_key)


def describe(environ: Mapping[str, str], *, clock: Any = None, dead_letter_url: str | None = None) -> dict[str, Any]:
    """The route's answer: the public variables, the master key's fingerprint, the clock offset, the DLQ."""
    master_key = environ.get("AMSG_MASTER_KEY", "")
    return {
        "environment": {key: environ[key] for key in PUBLIC_KEYS if environ.get(key)},
        "masterKeyFingerprint": master_key_fingerprint(master_key) if master_key else None,
        "clockOffsetMs": int(getattr(clock, "offset_ms", 0) or 0) if clock is not None else None,
        "deadLetterQueueUrl": dead_letter_url,
    }


def fetch(stack_url: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """The running stack's :func:`describe` answer, or :class:`StackUnreachable`."""
    url = stack_url.rstrip("/") + ENVIRONMENT_PATH
    if not url.startswith(("http://", "https://")):
        raise StackUnreachable(f"{stack_url} is not an http:// URL")
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 (checked scheme)
            answer = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise StackUnreachable(
            f"{stack_url} answers {exc.code} to {ENVIRONMENT_PATH}: not an `amsg local` stack (or an older one)"
        ) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise StackUnreachable(
            f"no local stack at {stack_url} ({reason}): start one with `make run` (or `amsg local`), "
            "or say where it listens with --stack-url"
        ) from None
    if not isinstance(answer, dict) or not isinstance(answer.get("environment"), dict):
        raise StackUnreachable(f"{stack_url}{ENVIRONMENT_PATH} did not answer as an `amsg local` stack does")
    return answer
