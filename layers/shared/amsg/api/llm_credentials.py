"""``PUT|GET|DELETE /llm-credentials`` — per-user named LLM credentials referenced by tasks' ``credRefs``
(see docs/data-model.md). Responses are plain (not encrypted); request bodies of PUT and DELETE are.
Values never leave the server: GET lists ``{credId, updatedAt}`` only.

Fire-time resolution lives in :mod:`amsg.domain.credentials` (``resolve_cred_value``,
``make_credential_lookup``), re-exported here for convenience.
"""

from __future__ import annotations

from typing import Any

from amsg.context import AppContext
from amsg.crypto import UserCodec, compact_json, storage_size
from amsg.domain.credentials import (
    CRED_PUT_BATCH_MAX,
    CRED_ROWS_PER_USER_MAX,
    cred_value_error,
    encrypt_cred_value,
    make_credential_lookup,
    resolve_cred_value,
)
from amsg.domain.ownership import ownership_of
from amsg.domain.validation import CRED_ID_MAX_LENGTH, validate_cred_id
from amsg.errors import api_error, invalid_parameters
from amsg.http.gates import (
    require_user_id,
)
from amsg.http.request import ApiRequest
from amsg.http.responses import ApiResponse, ok
from amsg.jsonio import JsonObject
from amsg.observability import logger
from amsg.ports import CredentialWrite
from amsg.timeutil import iso_from_ms

from .common import authenticate, open_encrypted_body

__all__ = [
    "delete_llm_credentials",
    "get_llm_credentials",
    "make_credential_lookup",
    "put_llm_credentials",
    "resolve_cred_value",
]

# DynamoDB imposes these: one item ≤ 400 KB, one transaction ≤ 4 MB. Realistic values are a few
# KB; only values padded with large extra fields can reach them, and those get 413 instead of a 500.
MAX_STORED_VALUE_CHARS = 350_000
MAX_STORED_BATCH_CHARS = 3_500_000

_CRED_ID_RULE = f"必须是 1–{CRED_ID_MAX_LENGTH} 字符、不含控制字符的字符串"


def _body(request: ApiRequest, ctx: AppContext, **overrides: Any) -> tuple[str, UserCodec, JsonObject]:
    opened = open_encrypted_body(request, ctx, **overrides)
    return opened.user_id, opened.codec, opened.body


def put_llm_credentials(request: ApiRequest, ctx: AppContext) -> ApiResponse:
    user_id, codec, body = _body(request, ctx)
    credentials = body.get("credentials")
    if not isinstance(credentials, list) or not credentials:
        raise invalid_parameters(invalid=["credentials"], message="credentials 必须是非空数组")
    if len(credentials) > CRED_PUT_BATCH_MAX:
        raise invalid_parameters(invalid=["credentials"], message=f"credentials 一批最多 {CRED_PUT_BATCH_MAX} 条")
    for i, entry in enumerate(credentials):
        if not isinstance(entry, dict) or not validate_cred_id(entry.get("credId")):
            raise invalid_parameters(
                invalid=[f"credentials[{i}].credId"], message=f"credentials[{i}].credId {_CRED_ID_RULE}"
            )
        problem = cred_value_error(entry.get("value"))
        if problem:
            raise invalid_parameters(invalid=[f"credentials[{i}].value"], message=f"credentials[{i}].{problem}")
    store = ctx.credentials

    latest: dict[str, JsonObject] = {}
    for entry in credentials:  # duplicates: the last occurrence wins (and counts once)
        latest[entry["credId"]] = entry
    try:
        existing = {cred_id for cred_id, _ in store.list(user_id)}
    except Exception as exc:
        logger.warning("credential listing failed", extra={"error": type(exc).__name__})
        raise api_error("LLM_CREDENTIALS_LOOKUP_FAILED", "凭据清单读取失败，请稍后重试") from exc
    adding = sum(1 for cred_id in latest if cred_id not in existing)
    if len(existing) + adding > CRED_ROWS_PER_USER_MAX:
        raise api_error(
            "LLM_CREDENTIALS_LIMIT_EXCEEDED",
            f"单用户最多存 {CRED_ROWS_PER_USER_MAX} 行凭据",
            details={"existing": len(existing), "adding": adding, "limit": CRED_ROWS_PER_USER_MAX},
        )

    _check_sizes(latest.values())
    writes = []
    for cred_id, entry in latest.items():
        ownership = ownership_of(entry)  # owner / kind / ownerGeneration of the entry; bad ones are 409
        writes.append(
            CredentialWrite(
                cred_id,
                encrypt_cred_value(entry["value"], codec),
                owner=ownership.claim(codec),
                generation=ownership.generation,
            )
        )
    upserted = store.upsert(user_id, writes, ctx.now_ms())
    return ok({"upserted": upserted})


def _check_sizes(entries: Any) -> None:
    total = 0
    for entry in entries:
        stored = storage_size(len(compact_json(entry["value"]).encode("utf-8")))
        if stored > MAX_STORED_VALUE_CHARS:
            raise api_error("REQUEST_BODY_TOO_LARGE", details={"maxBytes": (MAX_STORED_VALUE_CHARS - 66) // 2})
        total += stored
    if total > MAX_STORED_BATCH_CHARS:
        raise api_error("REQUEST_BODY_TOO_LARGE", details={"maxBytes": (MAX_STORED_BATCH_CHARS - 66) // 2})


def get_llm_credentials(request: ApiRequest, ctx: AppContext) -> ApiResponse:
    authenticate(request, ctx)
    user_id = require_user_id(request)
    store = ctx.credentials
    rows = store.list(user_id)
    listed = [{"credId": cred_id, "updatedAt": "" if at is None else iso_from_ms(at)} for cred_id, at in rows]
    return ok({"credentials": listed})


def delete_llm_credentials(request: ApiRequest, ctx: AppContext) -> ApiResponse:
    # every decrypt or JSON failure is DECRYPTION_FAILED here, as in the reference;
    # a non-object stays INVALID_PAYLOAD_FORMAT
    user_id, _, body = _body(request, ctx, bad_json=api_error("DECRYPTION_FAILED"))
    given = [
        name
        for name in ("all", "credIds", "credIdPrefix")
        if (body.get(name) is True if name == "all" else name in body)
    ]
    if not given:
        raise invalid_parameters(
            invalid=["credIds", "credIdPrefix"], message="要么 { all: true }，要么 credIds 非空数组，要么 credIdPrefix"
        )
    if len(given) > 1:
        raise invalid_parameters(invalid=given, message=f"{' / '.join(given)} 只能给一个")
    selector = given[0]
    if selector == "credIds":
        cred_ids = body["credIds"]
        if not isinstance(cred_ids, list) or not cred_ids:
            raise invalid_parameters(invalid=["credIds"], message="credIds 必须是非空数组")
        for i, cred_id in enumerate(cred_ids):
            if not validate_cred_id(cred_id):
                raise invalid_parameters(invalid=[f"credIds[{i}]"], message=f"credIds[{i}] 不是合法 cred_id")
    elif selector == "credIdPrefix" and not validate_cred_id(body["credIdPrefix"]):
        raise invalid_parameters(invalid=["credIdPrefix"], message=f"credIdPrefix {_CRED_ID_RULE}")

    store = ctx.credentials
    if selector == "all":
        deleted = store.delete_all(user_id)
    elif selector == "credIds":
        deleted = store.delete_ids(user_id, list(dict.fromkeys(body["credIds"])))
    else:
        deleted = store.delete_prefix(user_id, body["credIdPrefix"])
    return ok({"deleted": deleted})
