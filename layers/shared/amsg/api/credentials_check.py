"""credRefs existence checks at schedule/update time: a missing credential is a 400 now, not a failed fire."""

from __future__ import annotations

from collections.abc import Iterable

from amsg.context import AppContext
from amsg.errors import api_error
from amsg.observability import logger


def require_credentials_exist(ctx: AppContext, user_id: str, cred_ids: Iterable[str]) -> None:
    store = ctx.credentials
    wanted = list(dict.fromkeys(cred_ids))
    try:
        found = store.existing_cred_ids(user_id, wanted)
    except Exception as exc:
        logger.warning("credential lookup failed", extra={"error": type(exc).__name__})
        raise api_error("LLM_CREDENTIALS_LOOKUP_FAILED") from exc
    missing = [cred_id for cred_id in wanted if cred_id not in found]
    if missing:
        raise api_error("CREDENTIAL_NOT_FOUND", details={"missingCredIds": missing})
