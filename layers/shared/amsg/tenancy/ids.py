"""What a tenant id may be wherever it travels (item keys, queue messages, tokens): docs/tenancy-data.md."""

from __future__ import annotations

import re

_TENANT_ID = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_UUID = re.compile(r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}")


def valid_tenant_id(tenant_id: object) -> bool:
    """1-128 of ``A-Z a-z 0-9 _ . -`` (the reference's ids are UUID v4). Never a ``#``: a tenant's key namespace
    ``N#<tenantId>#`` then ends at the id's first ``#``, so no tenant's keys can be spelled as another tenant's
    (``N#a#U#b#U#x`` is tenant ``a``'s user ``b#U#x`` and nobody else's)."""
    return isinstance(tenant_id, str) and _TENANT_ID.fullmatch(tenant_id) is not None


def canonical_tenant_id(tenant_id: str) -> str:
    """The spelling this deployment stores a tenant id in: a UUID in lower case (init-tenant and ``amsg tenants
    create`` store it so), anything else as given. The one place ids are normalised."""
    trimmed = tenant_id.strip()
    return trimmed.lower() if _UUID.fullmatch(trimmed) else trimmed
