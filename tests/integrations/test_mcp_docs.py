"""docs/integrations/: each page's example runs as printed and prints what the page
says (tests/test_docs.py checks these pages as it does every page of docs/)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests import test_docs as checks
from tests.support import ROOT


@pytest.mark.slow
def test_the_mcp_example_prints_what_the_page_says() -> None:
    page = ROOT / "docs" / "integrations" / "mcp.md"
    (code,) = checks.python_blocks(page)
    printed = re.search(r"It prints:\n\n```text\n(.*?)```", checks.text(page), re.S)
    assert printed, "no output block after the example"
    # As installed: the actormem command on PATH.
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env={**os.environ, "PATH": path},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == printed.group(1)
