"""Each framework adapter, imported without its extra, says how to install it."""

from __future__ import annotations

import importlib
import subprocess
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


@pytest.mark.slow
def test_actormem_imports_without_the_frameworks() -> None:
    code = (
        "import sys\n"
        "sys.modules['agent_framework'] = sys.modules['agentscope'] = None\n"
        "import actormem, actormem.actors.integrations, actormem.actors.integrations._common\n"
        "from actormem.runtime.cli import main\n"
        "main(['--help'])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "mcp" in proc.stdout  # every command loaded
