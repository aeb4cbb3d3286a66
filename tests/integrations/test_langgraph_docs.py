"""docs/integrations/langgraph.md: its example runs as printed and prints what the
page says (tests/test_docs.py checks the page as it does every page of docs/)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests import test_docs as checks
from tests.support import ROOT

PAGE = ROOT / "docs" / "integrations" / "langgraph.md"


@pytest.mark.slow
def test_the_langgraph_example_prints_what_the_page_says() -> None:
    (code,) = checks.python_blocks(PAGE)
    printed = re.search(r"It prints:\n\n```text\n(.*?)```", checks.text(PAGE), re.S)
    assert printed, "no output block after the example"
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == printed.group(1)
    assert proc.stderr == ""  # a library prints nothing, and no warning


def test_the_module_without_the_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "langgraph.store.base", None)
    monkeypatch.delitem(sys.modules, "actormem.actors.integrations.langgraph", raising=False)
    from actormem.actors.integrations._extras import MissingExtraError

    with pytest.raises(MissingExtraError, match=r"pip install 'actormem\[langgraph\]'"):
        import actormem.actors.integrations.langgraph  # noqa: F401
