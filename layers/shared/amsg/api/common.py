"""Small helpers several routes share (kept here so each route module reads as its check order)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from amsg.context import AppContext
from amsg.crypto import DecryptError, decrypt_from_storage
from amsg.errors import ApiError
from amsg.http.gates import (
    decrypt_request_object,
    require_client_token,
    require_encryption_version,
    require_payload_encrypted,
    require_user_id,
)
from amsg.http.request import ApiRequest


def authenticate(request: ApiRequest, ctx: AppContext) -> None:
    require_client_token(request, ctx.secrets.client_token)


@dataclass(frozen=True)
class EncryptedBody:
    user_id: str
    user_key: str
    body: dict[str, Any]


def open_encrypted_body(
    request: ApiRequest, ctx: AppContext, *, bad_json: ApiError | None = None, not_object: ApiError | None = None
) -> EncryptedBody:
    """The encrypted-body gate of the write routes, in the reference's order: auth →
    X-Payload-Encrypted → X-User-Id → X-Encryption-Version → envelope → decrypt → object."""
    authenticate(request, ctx)
    require_payload_encrypted(request)
    user_id = require_user_id(request)
    require_encryption_version(request)
    user_key = ctx.user_key(user_id)
    return EncryptedBody(
        user_id, user_key, decrypt_request_object(request, user_key, bad_json=bad_json, not_object=not_object)
    )


def decrypt_payload(encrypted: str, user_key: str) -> dict[str, Any]:
    """A stored task payload; an unreadable one is an internal error of the whole request, as in the reference."""
    try:
        value = json.loads(decrypt_from_storage(encrypted, user_key))
    except (DecryptError, ValueError) as exc:
        raise StoredPayloadUnreadable("stored task payload cannot be decrypted") from exc
    if not isinstance(value, dict):
        raise StoredPayloadUnreadable("stored task payload is not an object")
    return value


class StoredPayloadUnreadable(Exception):
    code = "PAYLOAD_DECRYPT_FAILED"
