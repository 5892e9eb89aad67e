"""``amsg local``'s banner says which DynamoDB plays the table and, for the moto fallback, its limits."""

from __future__ import annotations

import sys
from pathlib import Path

from amsg_local.cli import _banner, backend_description, start_local_stack

from tests.support.tiny_stack import write_tiny_project


def test_banner_names_the_moto_fallback_and_its_limits(tmp_path: Path) -> None:
    saved = list(sys.path)
    try:
        with start_local_stack(template_path=write_tiny_project(tmp_path), dynamodb_local=False) as stack:
            backend = backend_description(stack)
            text = _banner(stack, tick_interval_s=0, backend=backend, delivery_missing=None)
    finally:
        sys.path[:] = saved
    assert stack.backend == "moto"
    assert f"dynamodb       {stack.dynamodb_endpoint} (embedded moto" in text
    for words in ("one request at a time", "gone on stop", "MB per 1,000 writes", "DynamoDB Local"):
        assert words in text
