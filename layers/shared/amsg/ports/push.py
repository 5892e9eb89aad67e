"""The Web Push port."""

from __future__ import annotations

from typing import Protocol, Required, TypedDict

# ---- Web Push ---------------------------------------------------------------------------------------------
#
# Failure model: ``PushSender.send`` returns normally on a 2xx and RAISES :class:`amsg.failures.PushSendError`
# on anything else. An exception rather than a result object: the engine's failure path is exception-driven like
# the reference's (``code``/``statusCode``/``permanent`` on the thrown error), a forgotten ``if not result.ok``
# would silently count a failed push as delivered, and the reasoning push is isolated with a try/except anyway.

MAX_PUSH_PAYLOAD_BYTES = 3993
"""Plaintext limit: 4096 − 103 aes128gcm overhead (16 salt, 4 rs, 1 idlen, 65 keyid, 1 pad, 16 tag)."""

SCHEDULED_PUSH_TTL_S = 2_419_200
"""TTL header of the scheduled sender: 4 weeks."""


class PushKeys(TypedDict, total=False):
    p256dh: str  # the browser's P-256 public key, base64url
    auth: str  # the 16-byte auth secret, base64url


class PushSubscription(TypedDict, total=False):
    """A browser subscription in its ``toJSON()`` shape, as stored (``PUT /push-subscription`` checked it)."""

    endpoint: Required[str]
    expirationTime: int | float | None
    keys: PushKeys


class PushSender(Protocol):
    def send(
        self,
        subscription: PushSubscription,
        payload: bytes | str,
        *,
        ttl: int = SCHEDULED_PUSH_TTL_S,
        timeout_s: float | None = None,
    ) -> int:
        """Encrypt ``payload`` (UTF-8 JSON) for ``subscription`` (browser ``toJSON()`` shape) and POST it.

        Returns the 2xx status; raises :class:`amsg.failures.PushSendError` on any other outcome. ``timeout_s``
        overrides the sender's HTTP timeout for this call (the instant path's remaining budget).
        """
        ...
