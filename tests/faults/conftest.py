"""Every fault-injection and bad-input test is slow: ``make test-fast`` leaves them out,
``make test`` and ``make faults`` run them."""

from __future__ import annotations

from pathlib import Path

import pytest

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A conftest's hook sees the whole session's items: mark only this folder's.
    for item in items:
        if item.path.is_relative_to(_HERE):
            item.add_marker(pytest.mark.slow)
