"""Pytest fixtures for the loopback fake push service.

Enable them everywhere with ``pytest_plugins = ["tests.support.push_fixtures"]`` in the root ``tests/conftest.py``
(or, for one module, ``from tests.support.push_fixtures import fake_push_fixture  # noqa: F401``; the fixture
is registered under the name ``fake_push``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.fake_push import FakePushService


@pytest.fixture(name="fake_push")
def fake_push_fixture() -> Iterator[FakePushService]:
    """A started, strict :class:`FakePushService` (201 by default), stopped after the test."""
    with FakePushService() as service:
        yield service
