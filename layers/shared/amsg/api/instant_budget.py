"""Request-time check of an ``instant`` message whose text is known (no LLM): it must split under the pattern's
CPU budget and every push must fit the Web Push budget, or the request is a 400 before anything is stored or
sent (the reference answers 500 ``MESSAGE_SEND_FAILED`` after trying)."""

from __future__ import annotations

from amsg.domain.limits import MAX_SAFE_INTEGER
from amsg.domain.splitting import SplitPatternFailure, split_message
from amsg.engine.pushes import Occurrence, content_pushes, encode_push
from amsg.errors import api_error, invalid_parameters
from amsg.ports import MAX_PUSH_PAYLOAD_BYTES
from amsg.task_payload import StoredPayload

TOO_LARGE_MESSAGE = "instant 消息的单条推送超过 Web Push 上限，请缩短 userMessage 或调整 splitPattern"


def check_instant_text(stored: StoredPayload, *, task_uuid: str, send_ms: int, now_ms: int) -> None:
    """Raise the documented 400 if the stored instant payload's ``userMessage`` could never be pushed."""
    text = stored.get("userMessage")
    if not isinstance(text, str):
        return
    try:
        segments = split_message(text, stored.get("splitPattern"))
    except SplitPatternFailure:
        raise invalid_parameters(invalid=["splitPattern"], message="splitPattern 无法在时间预算内切分该消息") from None
    # The largest ids the task can get: the real push is never longer than this one.
    occurrence = Occurrence(MAX_SAFE_INTEGER, task_uuid, send_ms)
    for index, push in enumerate(content_pushes(stored, occurrence, segments, now_ms)):
        size = len(encode_push(push))
        if size > MAX_PUSH_PAYLOAD_BYTES:
            raise api_error(
                "INVALID_PARAMETERS",
                TOO_LARGE_MESSAGE,
                {"invalidFields": ["userMessage"], "segment": index, "bytes": size, "maxBytes": MAX_PUSH_PAYLOAD_BYTES},
            )
