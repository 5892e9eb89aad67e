"""``PUT|GET|DELETE /client-state``: the per-user cloud mirror of client state.

Check order (the reference's): PUT = auth → ``X-Payload-Encrypted`` → ``X-User-Id`` → ``X-Encryption-Version`` →
envelope → decrypt → object → entries → per-entry validation → store support (501) → write. GET/DELETE =
auth → ``X-User-Id`` → query → store support → operation.

Size: a value may be 5 MiB (``STATE_VALUE_TOO_LARGE`` above), but one request must fit Lambda's 6 MB invocation
payload, so the body cap ``MAX_RAW_BODY_BYTES`` (4 000 000 raw bytes, 413 ``REQUEST_BODY_TOO_LARGE``, enforced
before this module runs) bounds what one uncompressed PUT can carry: 2 999 859 UTF-8 bytes for a single entry
with one-character namespace and key (see docs/compatibility.md).
"""

from __future__ import annotations

from dataclasses import replace

from amsg.context import AppContext
from amsg.domain.client_state import (
    DEFAULT_MAX_STATE_VALUE_BYTES,
    MAX_STATE_ENTRIES,
    StateEntry,
    has_reserved_chars,
    read_namespace,
    validate_entry,
    well_formed,
    write_entries,
)
from amsg.domain.jsvalues import js_trim
from amsg.domain.ownership import ownership_of
from amsg.errors import CloudGuardError, PartialWriteError, api_error
from amsg.http.gates import (
    require_user_id,
)
from amsg.http.request import ApiRequest
from amsg.http.responses import ApiResponse, encrypted, internal_error, ok
from amsg.jsonio import JsonObject
from amsg.observability import logger

from .common import authenticate, open_encrypted_body


def put_client_state(request: ApiRequest, ctx: AppContext) -> ApiResponse:
    opened = open_encrypted_body(request, ctx)
    user_id, codec, body = opened.user_id, opened.codec, opened.body

    entries = body.get("entries")
    if not isinstance(entries, list) or not entries:
        raise api_error("INVALID_STATE_ENTRIES")
    if len(entries) > MAX_STATE_ENTRIES:
        raise api_error("TOO_MANY_STATE_ENTRIES", f"单次最多 {MAX_STATE_ENTRIES} 条", {"count": len(entries)})

    accepted: list[StateEntry] = []
    rejected: list[JsonObject] = []
    for index, raw in enumerate(entries):
        checked = validate_entry(raw, index, DEFAULT_MAX_STATE_VALUE_BYTES)
        if isinstance(checked, StateEntry):
            # a bad owner or generation aborts the whole request with 409 (the guard's code)
            accepted.append(replace(checked, ownership=ownership_of(raw)))
        else:
            rejected.append(checked)

    store = ctx.client_state
    try:
        result = write_entries(store, user_id, codec, accepted, ctx.now_ms())
    except PartialWriteError as exc:
        return _partial_failure(exc)

    data: JsonObject = {"upserted": result.upserted, "skipped": result.skipped}
    if result.deleted > 0:
        data["deleted"] = result.deleted
    if result.skipped_entries:
        data["skippedEntries"] = result.skipped_entries
    if rejected:
        data["rejected"] = rejected
    return ok(data)


def _partial_failure(exc: PartialWriteError) -> ApiResponse:
    """The failing transaction's status, plus which entries did commit (a split write is not atomic)."""
    applied = {"appliedEntries": exc.applied}
    cause = exc.cause
    if isinstance(cause, CloudGuardError):  # 409, not the reference's 500
        error = {"code": cause.code, "message": str(cause), "details": applied}
        return ApiResponse(409, {"success": False, "error": error})
    logger.warning("client state write partially applied", extra={"applied": len(exc.applied)})
    response = internal_error(cause, "request")
    response.body["error"]["details"] = applied
    return response


def get_client_state(request: ApiRequest, ctx: AppContext) -> ApiResponse:
    authenticate(request, ctx)
    user_id = require_user_id(request)
    namespace = request.param("namespace") or ""
    if not js_trim(namespace):
        raise api_error("NAMESPACE_REQUIRED")
    if has_reserved_chars(namespace):
        raise api_error("INVALID_STATE_NAMESPACE")
    store = ctx.client_state
    namespace = well_formed(namespace)
    codec = ctx.codec(user_id)
    entries = read_namespace(store, user_id, codec, namespace)
    return encrypted({"namespace": namespace, "entries": entries}, codec)


def delete_client_state(request: ApiRequest, ctx: AppContext) -> ApiResponse:
    authenticate(request, ctx)
    user_id = require_user_id(request)
    namespace = request.param("namespace")
    store = ctx.client_state
    if namespace is None:
        return ok({"deleted": store.delete_all(user_id)})
    if not js_trim(namespace):
        raise api_error("INVALID_STATE_NAMESPACE", "namespace 传了就不能是空的（不带 namespace 参数才是整表全清）")
    if has_reserved_chars(namespace):
        raise api_error("INVALID_STATE_NAMESPACE")
    namespace = well_formed(namespace)
    return ok({"deleted": store.delete_namespace(user_id, namespace), "namespace": namespace})
