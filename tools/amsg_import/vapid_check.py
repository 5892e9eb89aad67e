"""Does push keep working after the move? (docs/import.md, "Push keeps working").

A browser's push subscription is bound to the VAPID public key it was made with (its ``applicationServerKey``),
and a push service refuses (403) a push signed with another key. The reference's database does not record that
key (a subscription holds its endpoint and the browser's own keys only), so the import cannot read it there: it
compares the key the operator names as the reference's (``--reference-vapid-public-key``, or the reference's
own variable ``NEXT_PUBLIC_VAPID_PUBLIC_KEY`` in the environment) with the target's ``AMSG_VAPID_PUBLIC_KEY``
when both are known, and otherwise says that the reference's pair must come along.
"""

from __future__ import annotations

from collections.abc import Mapping

REFERENCE_ENV = "NEXT_PUBLIC_VAPID_PUBLIC_KEY"  # the reference's name for its public key
TARGET_ENV = "AMSG_VAPID_PUBLIC_KEY"
BRING_THE_PAIR = (
    "deploy with the reference's VAPID pair (amsg bootstrap-secrets --vapid-public-key <its public key> "
    "--vapid-private-key-env <variable holding its private key>; locally AMSG_VAPID_PUBLIC_KEY/_PRIVATE_KEY)"
)


def _same_key(a: str, b: str) -> bool:
    from amsg.vapid import VapidConfigError, b64url_decode

    try:
        return b64url_decode(a.strip()) == b64url_decode(b.strip())
    except (VapidConfigError, ValueError):
        return a.strip() == b.strip()


def _short(key: str) -> str:
    key = key.strip()
    return f"{key[:8]}…{key[-6:]}" if len(key) > 16 else key


def vapid_warning(values: Mapping[str, str], reference_key: str | None, subscriptions: int) -> str | None:
    """The warning to print (None when push keeps working or nothing was subscribed). ``subscriptions`` counts
    the rows read that carry a push subscription (user-level subscriptions and tasks)."""
    if subscriptions == 0:
        return None
    reference = (reference_key or values.get(REFERENCE_ENV) or "").strip()
    target = (values.get(TARGET_ENV) or "").strip()
    if reference and target:
        if _same_key(reference, target):
            return None
        return (
            f"the target's VAPID public key ({TARGET_ENV} {_short(target)}) is not the reference's "
            f"({_short(reference)}): the push subscriptions imported ({subscriptions} subscription and task rows "
            f"read) were made for the reference's key, and push services refuse (403) every push signed with "
            f"another; {BRING_THE_PAIR}"
        )
    missing = " and ".join(
        name
        for name, known in (
            (f"the reference's public key (--reference-vapid-public-key or {REFERENCE_ENV})", reference),
            (f"the target's ({TARGET_ENV})", target),
        )
        if not known
    )
    return (
        f"the push subscriptions imported ({subscriptions} subscription and task rows read) were made for the "
        f"reference's VAPID public key, which its database does not record: {BRING_THE_PAIR}, or push services "
        f"refuse (403) every push to them. Give {missing} to have it checked"
    )
