"""The stored task payload: what ``POST /schedule-message`` (and a hook's follow-up) encrypts into a task, and
what the engine reads back when the task fires (see docs/data-model.md).

Keys are the reference's, in its order (the stored JSON is byte-compatible with it). A payload written by an
older version may lack later keys, so readers use ``.get``; values the client supplied keep the JSON the
validation accepted (``Any`` there: checked at scheduling, read with ``isinstance`` where it matters).
"""

from __future__ import annotations

from typing import Any, Required, TypedDict

from amsg.jsonio import JsonObject


class PublicOwner(TypedDict, total=False):
    """A cloud-data owner as a task records it: ``{type, id, label?}``."""

    type: Required[str]
    id: Required[str]
    label: str


class OwnerGuard(TypedDict):
    """The guard a task carries inside its payload: the owner and the generation it was written under."""

    owner: PublicOwner
    generation: int


class LastError(TypedDict, total=False):
    """The record of a task's last failed (or skipped) occurrence: JSON in its row's ``last_error`` (the API's
    ``lastError``) and, for a terminal outcome, in its payload."""

    at: Required[str]
    occurrence: str  # the occurrence's ISO time (empty when the task has none)
    reason: Required[str]
    errorCode: str
    pushStatus: int
    skippedCount: int  # a stale recurring task: the occurrences skipped
    nextSendAt: str


StoredPayload = TypedDict(
    "StoredPayload",
    {
        "contactName": str,
        "avatarUrl": str | None,
        "messageType": str,  # fixed | prompted | auto | instant
        "messageSubtype": str,
        "userMessage": str | None,
        "firstSendTime": str,
        "recurrenceType": str,  # none | daily | weekly
        "tzId": str | None,
        "apiUrl": Any,
        "apiKey": Any,
        "primaryModel": Any,
        "credRefs": dict[str, str] | None,
        "completePrompt": Any,
        "messages": list[Any] | None,
        "maxTokens": Any,
        "temperature": Any,
        "splitPattern": Any,  # a text, a list of texts, or null
        "llmExtraBody": JsonObject | None,
        # the write's explicit cloud ownership, as the client sent it (owner, kind, ownerGeneration)
        "owner": Any,
        "kind": Any,
        "ownerGeneration": Any,
        "metadata": Any,  # the client's object (a hook's ``task.metadata``)
        "__cloudOwnerGuard": OwnerGuard,  # set by the server only (an owned task)
        "lastError": LastError,  # the last failed delivery's record (kept until the next success)
        "pushSubscription": JsonObject,  # an older version's payload carried the subscription
    },
    total=False,
)
"""A task's payload as stored (encrypted) and fired."""
