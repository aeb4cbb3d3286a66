"""Shared fixtures: the anyio backend (asyncio: redis-py's asyncio client needs it)."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
