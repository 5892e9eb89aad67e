"""Pytest fixtures for the loopback fake push service.

Enable them everywhere with ``pytest_plugins = ["tests.support.push_fixtures"]`` in the root ``tests/conftest.py``
(or import the fixture names into a single test module).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.fake_push import FakePushService


@pytest.fixture
def fake_push() -> Iterator[FakePushService]:
    """A started, strict :class:`FakePushService` (201 by default), stopped after the test."""
    with FakePushService() as service:
        yield service
