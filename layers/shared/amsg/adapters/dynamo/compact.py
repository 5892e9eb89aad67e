"""The storage edge of ciphertext attributes: ``iv:tag:ciphertext`` hex text stored as bytes.

DynamoDB bills writes per KB of the larger of the old and new item, and a task or an outbox row is rewritten
several times on its way to a push. Hex text takes two bytes per byte of ciphertext; storing the same bytes as a
Binary attribute halves the payload and, for an ordinary message, brings the task item and the outbox row under
1 KB (docs/decisions.md, "What a delivered message costs"). Only the adapters see the packed form: a reader
gets the hex text back exactly, so the codec, the hooks and exports are unchanged. Items written before (a
String attribute) read as they are, and text that would not come back identical (not lower-case hex in three
parts) is stored as text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

_VERSION = 1


def pack(text: str) -> str | bytes:
    """``iv:tag:ct`` hex text as ``version, len(iv), len(tag), iv, tag, ct`` bytes (text when not exact)."""
    parts = text.split(":")
    if len(parts) != 3 or any(len(p) % 2 or p != p.lower() for p in parts):
        return text
    try:
        iv, tag, ct = (bytes.fromhex(p) for p in parts)
    except ValueError:
        return text
    if len(iv) > 255 or len(tag) > 255 or iv.hex() != parts[0] or tag.hex() != parts[1] or ct.hex() != parts[2]:
        return text
    return bytes((_VERSION, len(iv), len(tag))) + iv + tag + ct


def unpack(value: Any) -> str | None:
    """The hex text of a stored attribute: text as stored, packed bytes (``bytes`` or boto3's ``Binary``) back
    to ``iv:tag:ct``; None when absent."""
    if value is None or isinstance(value, str):
        return value
    raw = bytes(value.value if hasattr(value, "value") else value)
    if len(raw) < 3 or raw[0] != _VERSION:
        raise ValueError("unknown packed ciphertext")
    iv_end = 3 + raw[1]
    tag_end = iv_end + raw[2]
    return f"{raw[3:iv_end].hex()}:{raw[iv_end:tag_end].hex()}:{raw[tag_end:].hex()}"


_NAME_SEP = "\x1f"  # never in a named message id: the ports name printable ids only (``names_on_task``)


def pack_names(message_ids: Sequence[str]) -> str:
    """The message ids a task names (``ob_mids``) as one string: their common prefix once, then each one's rest
    (``msg_task_7@1893369660000_`` + ``0``, ``1``): a batch's ids share all but their last characters, and every
    byte of the task is billed at each of its writes."""
    prefix = min(message_ids, default="")
    for message_id in message_ids:
        while not message_id.startswith(prefix):
            prefix = prefix[:-1]
    return _NAME_SEP.join([prefix, *(message_id[len(prefix) :] for message_id in message_ids)])


def unpack_names(value: Any) -> tuple[str, ...]:
    """The ids :func:`pack_names` stored (none when the task names none)."""
    if not isinstance(value, str) or not value:
        return ()
    prefix, *rests = value.split(_NAME_SEP)
    return tuple(prefix + rest for rest in rests)
