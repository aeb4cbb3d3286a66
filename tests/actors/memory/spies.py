"""Spies the memory tests share."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from actormem.actors import Message


def spy_on_counting(monkeypatch: pytest.MonkeyPatch, *modules: ModuleType) -> list[Message]:
    """Every message ``count_tokens`` counts in ``modules``, in order."""
    counted: list[Message] = []
    for module in modules:
        real = module.count_tokens

        def counting(message: Message, counter: Any, real: Any = real) -> int:
            counted.append(message)
            return int(real(message, counter))

        monkeypatch.setattr(module, "count_tokens", counting)
    return counted
