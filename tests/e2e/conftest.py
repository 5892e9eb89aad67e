"""Fixtures of the end-to-end modules."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.e2e_stack import stack_with_push


@pytest.fixture(scope="package")
def shared_stack() -> Iterator[dict]:
    """One local stack (default settings, no client token) and its push service for every module that needs no
    configuration of its own: starting a stack is the slow part of an end-to-end module. Each test works as
    users of its own and moves the stack's clock only forward, so the modules do not disturb one another. Package
    scope, not session: a running stack points this process's AWS endpoint variables at itself, so it must be
    gone before tests of other packages run in the same (xdist worker) process."""
    with stack_with_push() as (stack, push):
        yield {"stack": stack, "push": push}
