"""The README's embedding example runs as printed."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.support import ROOT


def readme_block(heading: str) -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split(f"## {heading}", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, heading
    return match.group(1)


def test_embedding_example_runs() -> None:
    code = readme_block("Embedding the runtime")
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    n_messages, n_hits, tokens = proc.stdout.split()
    assert int(n_messages) == 5 and int(n_hits) == 2 and int(tokens) > 0


def test_runtime_example_runs() -> None:
    body = readme_block("The actor runtime")
    code = (
        "import anyio\n\nasync def main():\n"
        + "\n".join("    " + line for line in body.splitlines())
        + "\n\nanyio.run(main)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
