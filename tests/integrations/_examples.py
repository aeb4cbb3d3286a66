"""Runs a docs/integrations page's example as a user would: the page's one Python
block in a fresh interpreter, whose output must be the page's ``It prints:`` block."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests import test_docs as checks


def check_example(page: Path) -> None:
    """Run the example of ``page`` and assert it prints what the page says."""
    (code,) = checks.python_blocks(page)
    printed = re.search(r"It prints:\n\n```text\n(.*?)```", checks.text(page), re.S)
    assert printed, f"{page.name}: no output block after the example"
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=page.parent, timeout=90
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == printed.group(1)
