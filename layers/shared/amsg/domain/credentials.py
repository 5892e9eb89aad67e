"""LLM credential values: shape check, at-rest encoding and fire-time resolution.

Pure functions; the store only ever sees ciphertext. A resolved value is a **new** dict on every call and must
only be merged into the outgoing LLM request (never into payloads, hook contexts, metadata or pushes).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from amsg import jsonio
from amsg.crypto import DecryptError, UserCodec, compact_json
from amsg.domain.jsvalues import is_header_safe, is_plain_object, utf16_len
from amsg.jsonio import JsonObject

CRED_VALUE_FIELDS = ("apiUrl", "apiKey", "primaryModel")
CRED_VALUE_FIELD_MAX_LENGTH = 2048
CRED_PUT_BATCH_MAX = 100
CRED_ROWS_PER_USER_MAX = 500


def cred_value_error(value: Any) -> str | None:
    """``validateCredValue``: the reference's message naming the bad field, or None ("truthy + length" only)."""
    if not is_plain_object(value):
        return "value 必须是 { apiUrl, apiKey, primaryModel } 对象"
    for name in CRED_VALUE_FIELDS:
        field = value.get(name)
        if not isinstance(field, str) or not field:
            return f"value.{name} 必须是非空字符串"
        if utf16_len(field) > CRED_VALUE_FIELD_MAX_LENGTH:
            return f"value.{name} 不能超过 {CRED_VALUE_FIELD_MAX_LENGTH} 字符"
    if not is_header_safe(value["apiKey"]):  # sent as an Authorization header: anything else never goes out
        return "value.apiKey 只能包含可打印 ASCII 字符（它作为 HTTP 头发送）"
    return None


def encrypt_cred_value(value: Mapping[str, Any], codec: UserCodec) -> str:
    """Storage ciphertext of the compact JSON of the value as sent (extra fields are kept, like the reference)."""
    return codec.encrypt(compact_json(value))


def resolve_cred_value(encrypted_value: Any, codec: UserCodec) -> JsonObject | None:
    """Decrypt a stored credential (``resolveLlmCredential``): a new ``{apiUrl, apiKey, primaryModel}`` dict, or
    None when the ciphertext is missing/empty, cannot be decrypted (e.g. the master key changed), is not JSON, or
    is not an object. Completeness is judged by the caller (:func:`amsg.domain.llm.resolve_chat_credentials`)."""
    if not isinstance(encrypted_value, str) or not encrypted_value:
        return None
    try:
        parsed = jsonio.loads(codec.decrypt(encrypted_value))
    except (DecryptError, ValueError):
        return None
    if not isinstance(parsed, dict):
        return None
    return {name: parsed.get(name) for name in CRED_VALUE_FIELDS}


class _ValueReader(Protocol):
    def get_values(self, user_id: str, cred_ids: list[str]) -> dict[str, str]: ...


def make_credential_lookup(
    store: _ValueReader | None, user_id: str, codec: UserCodec
) -> Callable[[str], JsonObject | None] | None:
    """A :data:`amsg.domain.llm.CredentialLookup` over the store (None when the deployment has no store):
    ``resolve_chat_credentials(payload, make_credential_lookup(ctx.credentials, user_id, codec))``.
    Store read errors propagate (the delivery then fails retryably)."""
    if store is None:
        return None

    def lookup(cred_id: str) -> JsonObject | None:
        return resolve_cred_value(store.get_values(user_id, [cred_id]).get(cred_id), codec)

    return lookup
