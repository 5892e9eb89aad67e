"""``PUT /update-message?id=``: validate the patch, merge into the stored payload, write
conditionally (pending; plus no live lease when the occurrence moves)."""

from __future__ import annotations

from amsg.context import AppContext
from amsg.crypto import compact_json
from amsg.domain.limits import can_be_task_uuid, canonical_task_uuid
from amsg.domain.update_validation import validate_update_patch
from amsg.domain.validation import MAX_TASK_PAYLOAD_BYTES, payload_too_large_error
from amsg.engine import registry_upkeep
from amsg.errors import api_error
from amsg.http.gates import (
    decrypt_request_object,
    require_encryption_version,
    require_payload_encrypted,
    require_query_id,
    require_user_id,
)
from amsg.http.request import ApiRequest
from amsg.http.responses import ApiResponse, ok
from amsg.timeutil import iso_from_ms

from .common import authenticate
from .credentials_check import require_credentials_exist

# a concurrent payload write (another update, the engine) makes us merge again on the fresh row
MERGE_ATTEMPTS = 3


def update_message(request: ApiRequest, ctx: AppContext) -> ApiResponse:
    authenticate(request, ctx)
    task_uuid = canonical_task_uuid(require_query_id(request))
    user_id = require_user_id(request)
    require_payload_encrypted(request)
    require_encryption_version(request)
    codec = ctx.codec(user_id)
    raw_patch = decrypt_request_object(
        request,
        codec,
        bad_json=api_error("DECRYPTION_FAILED"),
        not_object=api_error("INVALID_UPDATE_DATA"),
    )
    patch = validate_update_patch(raw_patch)
    if patch.cred_ref_ids:
        require_credentials_exist(ctx, user_id, patch.cred_ref_ids)

    if not can_be_task_uuid(task_uuid):
        raise api_error("TASK_NOT_FOUND")
    for _ in range(MERGE_ATTEMPTS):
        row = ctx.tasks.get_task(user_id, task_uuid)
        if row is None:
            raise api_error("TASK_NOT_FOUND")
        if row.status != "pending":
            raise api_error("TASK_ALREADY_COMPLETED")
        stored = codec.decrypt_payload(row.encrypted_payload)
        cred_refs = stored.get("credRefs")
        if patch.inline_credential_keys and isinstance(cred_refs, dict) and cred_refs.get("chat"):
            raise api_error("TASK_USES_CRED_REFS", details={"invalidFields": patch.inline_credential_keys})
        merged, applied = patch.apply(stored)
        old_size = len(compact_json(stored).encode("utf-8"))
        text = compact_json(merged)
        new_size = len(text.encode("utf-8"))
        if new_size > MAX_TASK_PAYLOAD_BYTES and new_size > old_size:
            raise payload_too_large_error(new_size)
        next_send_at_ms = patch.next_send_at_ms
        moves = next_send_at_ms is not None and next_send_at_ms != row.next_send_at_ms
        now_ms = ctx.now_ms()
        occurrence = next_send_at_ms if next_send_at_ms is not None else row.next_send_at_ms
        registry_kept = registry_upkeep.prepare_update(ctx, row, occurrence, merged, now_ms)
        updated_at = ctx.tasks.update_pending_task(
            user_id,
            task_uuid,
            encrypted_payload=codec.encrypt(text),
            next_send_at_ms=next_send_at_ms if moves else None,
            now_ms=now_ms,
            expected_rev=row.rev,
            owner=row.owner,  # the task's owner guards its updates; an update never changes it
            # a payload-only edit keeps a quiet-hours/cap deferral; moving the occurrence ends it
            keep_deferral=row.deferred_until_ms is not None and row.retry_after_ms == row.deferred_until_ms,
            registry_kept=registry_kept,
        )
        if updated_at is not None:
            applied_keys = set(applied) | ({"nextSendAt"} if moves else set())
            updated_fields = [key for key in raw_patch if key in applied_keys]
            return ok({"uuid": task_uuid, "updatedFields": updated_fields, "updatedAt": iso_from_ms(updated_at)})
        fresh = ctx.tasks.get_task(user_id, task_uuid)
        if fresh is not None and fresh.status == "pending" and fresh.rev != row.rev:
            continue  # the payload changed under us: merge again
        if next_send_at_ms is not None and fresh is not None and fresh.status == "pending":
            raise api_error("TASK_IN_FLIGHT")
        raise api_error("UPDATE_CONFLICT")
    raise api_error("UPDATE_CONFLICT")
