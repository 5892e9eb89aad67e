"""Small helpers several routes share (kept here so each route module reads as its check order)."""

from __future__ import annotations

import json
from typing import Any

from amsg.context import AppContext
from amsg.crypto import DecryptError, decrypt_from_storage
from amsg.http.gates import require_client_token
from amsg.http.request import ApiRequest


def authenticate(request: ApiRequest, ctx: AppContext) -> None:
    require_client_token(request, ctx.secrets.client_token)


def decrypt_payload(encrypted: str, user_key: str) -> dict[str, Any]:
    """A stored task payload; an unreadable one is an internal error of the whole request (api.md §3.6)."""
    try:
        value = json.loads(decrypt_from_storage(encrypted, user_key))
    except (DecryptError, ValueError) as exc:
        raise StoredPayloadUnreadable("stored task payload cannot be decrypted") from exc
    if not isinstance(value, dict):
        raise StoredPayloadUnreadable("stored task payload is not an object")
    return value


class StoredPayloadUnreadable(Exception):
    code = "PAYLOAD_DECRYPT_FAILED"
