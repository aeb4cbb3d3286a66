"""Each framework adapter, imported without its extra, says how to install it."""

from __future__ import annotations

import importlib
import sys

import pytest

from actormem.actors.integrations._extras import MissingExtraError


@pytest.mark.parametrize(
    ("adapter", "framework", "extra"),
    [
        ("agent_framework", "agent_framework", "agent-framework"),
        ("agentscope", "agentscope.agent", "agentscope"),
    ],
)
def test_without_the_extra_the_import_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, adapter: str, framework: str, extra: str
) -> None:
    name = f"actormem.actors.integrations.{adapter}"
    monkeypatch.setitem(sys.modules, framework, None)  # as if not installed
    monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.raises(MissingExtraError, match=rf"pip install 'actormem\[{extra}\]'"):
        importlib.import_module(name)
