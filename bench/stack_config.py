"""The local stack's configuration for a benchmark: a fixed master key and a fresh VAPID pair."""

from __future__ import annotations


def stack_config(**extra: str) -> tuple[dict[str, str], str]:
    """``(config, vapid_public_key)``: what ``start_local_stack(config=...)`` needs, plus ``extra`` variables."""
    from amsg.vapid import generate_vapid_keys

    public, private = generate_vapid_keys()
    config = {
        "AMSG_MASTER_KEY": "e" * 64,
        "AMSG_VAPID_PUBLIC_KEY": public,
        "AMSG_VAPID_PRIVATE_KEY": private,
        "AMSG_VAPID_EMAIL": "bench@example.test",
        **extra,
    }
    return config, public
