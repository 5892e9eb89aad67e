"""client_state rules shared by ``/client-state`` and the hooks' ``read_state``/``write_state``.

Validation mirrors the reference's per-entry checks (order, codes, messages; lengths in UTF-16 units, sizes in
UTF-8 bytes). Values are encrypted here, never in the store: the store receives storage ciphertext plus the
plaintext byte count it needs to report sizes the way the reference would.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from amsg import jsonio
from amsg.crypto import DecryptError, UserCodec
from amsg.domain.jsvalues import is_plain_object, is_positive_integer, js_trim, utf16_len
from amsg.domain.ownership import Ownership
from amsg.errors import PartialWriteError
from amsg.jsonio import JsonObject
from amsg.ports import ClientStateStore, OwnerClaim, StateWrite, StateWriteResult

MAX_STATE_ENTRIES = 200
MAX_NAMESPACE_CHARS = 128
MAX_KEY_CHARS = 256
DEFAULT_MAX_STATE_VALUE_BYTES = 5 * 1024 * 1024
# The reference slices values above 200 KiB into rows of at most this many plaintext bytes; our physical layout
# differs (one ciphertext cut into item-sized parts), but wire-visible counts follow the reference's rows.
REFERENCE_SLICE_BYTES = 200 * 1024
REFERENCE_CHUNK_MARKER_BYTES = len("\x1famsg-chunked\x1fv1\x1f")  # + decimal slice count
STORAGE_OVERHEAD_BYTES = 66  # hex iv (32) + ':' + hex tag (32) + ':'
DAY_MS = 86_400_000


@dataclass(frozen=True)
class StateEntry:
    """A validated entry; ``index`` is its position in the caller's list (rejections keep theirs)."""

    index: int
    namespace: str
    key: str
    value: str | None
    updated_at: int
    version: int | None = None
    ownership: Ownership | None = None  # owner / kind / ownerGeneration the entry carries

    def guard(self, now_ms: int) -> int:
        """``version ?? builtAt`` if a positive integer, else ``updatedAt``; clamped to server now."""
        return min(self.version if self.version else self.updated_at, now_ms)


class StateValueUnreadable(Exception):
    """A stored value failed to decrypt (master key changed, data corrupted): an internal error, like the reference."""

    code = "STATE_DECRYPT_FAILED"


# ---- text helpers -----------------------------------------------------------------------------------------


def well_formed(text: str) -> str:
    """Lone surrogates (possible from JSON ``\\ud800`` escapes) become U+FFFD, as JS ``TextEncoder`` does."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def has_reserved_chars(text: str) -> bool:
    """U+0000–U+001F are reserved for the storage layout (``INTERNAL_STATE_CHAR_RE``)."""
    return any(ord(ch) < 0x20 for ch in text)


def reference_footprint(plain_bytes: int) -> tuple[int, int]:
    """``(rows, bytes)`` the reference would store for a value of ``plain_bytes`` UTF-8 bytes.

    ≤ 200 KiB: one row of ``2p + 66`` hex bytes. Larger: a marker root row plus ``n = ceil(p / 204800)`` slice rows,
    each its own ciphertext (``2 · slice + 66``).
    """
    if plain_bytes <= REFERENCE_SLICE_BYTES:
        return 1, 2 * plain_bytes + STORAGE_OVERHEAD_BYTES
    slices = math.ceil(plain_bytes / REFERENCE_SLICE_BYTES)
    marker = REFERENCE_CHUNK_MARKER_BYTES + len(str(slices))
    return 1 + slices, marker + 2 * plain_bytes + STORAGE_OVERHEAD_BYTES * slices


# ---- validation (reference ``validateEntry``) --------------------------------------------------------------


def _reject(entry: Any, index: int, code: str, message: str, **extra: Any) -> JsonObject:
    rejection: JsonObject = {"index": index, "code": code, "message": message, **extra}
    if isinstance(entry, dict):
        if isinstance(entry.get("namespace"), str):
            rejection["namespace"] = well_formed(entry["namespace"])
        if isinstance(entry.get("key"), str):
            rejection["key"] = well_formed(entry["key"])
    return rejection


def validate_entry(
    entry: Any, index: int, max_value_bytes: int = DEFAULT_MAX_STATE_VALUE_BYTES
) -> StateEntry | JsonObject:
    """A :class:`StateEntry`, or the rejection object ``{index, code, message, namespace?, key?}``."""
    if not is_plain_object(entry):
        return _reject(entry, index, "INVALID_STATE_ENTRY", f"entries[{index}] 必须是对象")
    namespace = entry.get("namespace")
    if not isinstance(namespace, str) or not js_trim(namespace) or utf16_len(namespace) > MAX_NAMESPACE_CHARS:
        return _reject(
            entry, index, "INVALID_STATE_NAMESPACE",
            f"entries[{index}].namespace 必须是 1-{MAX_NAMESPACE_CHARS} 字符的字符串",
        )  # fmt: skip
    if has_reserved_chars(namespace):
        return _reject(
            entry, index, "INVALID_STATE_NAMESPACE",
            f"entries[{index}].namespace 不能包含控制字符（\\u0000-\\u001f 为库内部保留）",
        )  # fmt: skip
    key = entry.get("key")
    if not isinstance(key, str) or not js_trim(key) or utf16_len(key) > MAX_KEY_CHARS:
        return _reject(entry, index, "INVALID_STATE_KEY", f"entries[{index}].key 必须是 1-{MAX_KEY_CHARS} 字符的字符串")
    if has_reserved_chars(key):
        return _reject(
            entry, index, "INVALID_STATE_KEY", f"entries[{index}].key 不能包含控制字符（\\u0000-\\u001f 为库内部保留）"
        )
    value = entry.get("value")
    if value is not None and not isinstance(value, str):
        return _reject(
            entry, index, "INVALID_STATE_VALUE", f"entries[{index}].value 必须是字符串或 null（宿主自行序列化）"
        )
    if isinstance(value, str):
        value = well_formed(value)
        size = len(value.encode("utf-8"))
        if size > max_value_bytes:
            return _reject(
                entry, index, "STATE_VALUE_TOO_LARGE", f"entries[{index}].value 超过单条总上限",
                bytes=size, maxBytes=max_value_bytes,
            )  # fmt: skip
    updated_at = entry.get("updatedAt")
    if not is_positive_integer(updated_at):
        return _reject(
            entry, index, "INVALID_STATE_UPDATED_AT", f"entries[{index}].updatedAt 必须是正整数（epoch 毫秒）"
        )
    version = entry.get("version")
    if version is None:  # JS ``??``: null and undefined both fall through to builtAt
        version = entry.get("builtAt")
    if version is not None and not is_positive_integer(version):
        return _reject(
            entry, index, "INVALID_STATE_VERSION",
            f"entries[{index}].version / builtAt 必须是正整数（毫秒时间戳或单调递增版本号）",
        )  # fmt: skip
    return StateEntry(
        index=index,
        namespace=well_formed(namespace),
        key=well_formed(key),
        value=value,
        updated_at=int(updated_at),
        version=int(version) if version is not None else None,
    )


# ---- write / read ------------------------------------------------------------------------------------------


def write_entries(
    store: ClientStateStore,
    user_id: str,
    codec: UserCodec,
    entries: Sequence[StateEntry],
    now_ms: int,
    *,
    fence: tuple[str, int] | None = None,
    inherit: OwnerClaim | None = None,
) -> StateWriteResult:
    """Encrypt and write validated entries (one server-now for the whole batch).

    ``fence`` = (task uuid, claim version): a hook's write commits only while that claim is current
    (the store raises :class:`amsg.errors.ClaimLost` otherwise).

    A :class:`PartialWriteError` from the store is re-raised with the entries' own indexes.
    """
    writes = [
        StateWrite(
            namespace=e.namespace,
            key=e.key,
            value=None if e.value is None else codec.encrypt(e.value),
            guard=e.guard(now_ms),
            plain_bytes=0 if e.value is None else len(e.value.encode("utf-8")),
            owner=e.ownership.claim(codec) if e.ownership else None,
            generation=e.ownership.generation if e.ownership else 0,
        )
        for e in entries
    ]
    if not writes:
        return StateWriteResult()
    try:
        if fence is not None or inherit is not None:
            return store.upsert(user_id, writes, now_ms=now_ms, fence=fence, inherit=inherit)
        return store.upsert(user_id, writes, now_ms=now_ms)
    except PartialWriteError as exc:
        raise PartialWriteError([entries[i].index for i in exc.applied], exc.cause) from exc.cause


def read_namespace(store: ClientStateStore, user_id: str, codec: UserCodec, namespace: str) -> list[JsonObject]:
    """``[{namespace, key, value, updatedAt}]`` ordered by key (UTF-8 byte order = code point order)."""
    out = []
    for row in store.get_namespace(user_id, namespace):
        try:
            value = codec.decrypt(row.value)
        except DecryptError as exc:
            raise StateValueUnreadable("stored client state value cannot be decrypted") from exc
        out.append({"namespace": row.namespace, "key": row.key, "value": value, "updatedAt": row.updated_at})
    return out


def parse_ttl_config(raw: str | None) -> dict[str, float]:
    """``AMSG_CLIENT_STATE_TTL`` = JSON ``{namespace: days}``. Entries whose days are not a positive finite
    number are dropped (the reference skips them with a warning); anything but a JSON object is ``{}``."""
    if not raw or not raw.strip():
        return {}
    try:
        parsed = jsonio.loads(raw)
    except ValueError:
        return {}
    if not isinstance(parsed, Mapping):
        return {}
    out: dict[str, float] = {}
    for namespace, days in parsed.items():
        if isinstance(days, bool) or not isinstance(days, int | float):
            continue
        if math.isfinite(days) and days > 0:
            out[str(namespace)] = float(days)
    return out
