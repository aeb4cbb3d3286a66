"""Fixtures of the integration tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from actormem import MemoryRuntime
from actormem.actors import AppConfig
from actormem.runtime import LocalTransport


@pytest.fixture
async def local_rt() -> AsyncIterator[MemoryRuntime]:
    """An open MemoryRuntime in process (for the tests that need no second transport)."""
    async with MemoryRuntime(AppConfig(), transport=LocalTransport()) as rt:
        yield rt
