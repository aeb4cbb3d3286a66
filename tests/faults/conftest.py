"""The fault-injection suite: registers the ``faults`` marker until pyproject.toml does."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "faults: fault injection, bad input and isolation tests (make faults)"
    )
