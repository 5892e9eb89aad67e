"""Small helpers several routes share (kept here so each route module reads as its check order)."""

from __future__ import annotations

from dataclasses import dataclass

from amsg.context import AppContext
from amsg.crypto import UserCodec
from amsg.errors import ApiError
from amsg.http.gates import (
    decrypt_request_object,
    require_client_token,
    require_encryption_version,
    require_payload_encrypted,
    require_user_id,
)
from amsg.http.request import ApiRequest
from amsg.jsonio import JsonObject


def authenticate(request: ApiRequest, ctx: AppContext) -> None:
    require_client_token(request, ctx.secrets.client_token)


@dataclass(frozen=True)
class EncryptedBody:
    user_id: str
    codec: UserCodec
    body: JsonObject


def open_encrypted_body(
    request: ApiRequest, ctx: AppContext, *, bad_json: ApiError | None = None, not_object: ApiError | None = None
) -> EncryptedBody:
    """The encrypted-body gate of the write routes, in the reference's order: auth →
    X-Payload-Encrypted → X-User-Id → X-Encryption-Version → envelope → decrypt → object."""
    authenticate(request, ctx)
    require_payload_encrypted(request)
    user_id = require_user_id(request)
    require_encryption_version(request)
    codec = ctx.codec(user_id)
    return EncryptedBody(
        user_id, codec, decrypt_request_object(request, codec, bad_json=bad_json, not_object=not_object)
    )
