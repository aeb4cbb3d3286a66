"""Each package's declared public surface is exactly what it exports."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.modules import is_public, package_modules


@pytest.mark.parametrize(
    "name",
    [
        "actormem",
        "actormem.runtime",
        "actormem.actors",
        "actormem.runtime.transports",
        "actormem.runtime.redis",
    ],
)
def test_all_names_are_importable_and_complete(name: str) -> None:
    module = importlib.import_module(name)
    declared = set(module.__all__)
    for attr in declared:
        assert hasattr(module, attr), f"{name}.__all__ names missing {attr}"
    public = {
        attr
        for attr, value in vars(module).items()
        if not attr.startswith("_") and getattr(value, "__module__", "").startswith(name)
    }
    assert public <= declared, f"{name} exports undeclared names: {public - declared}"


def test_openai_is_imported_only_when_an_api_is_used() -> None:
    # It takes longer to import than the rest of actormem together, and every
    # worker process and CLI command would pay for it (the default is offline).
    code = (
        "import sys, actormem.actors.app.wiring, actormem.actors.app.cli\n"
        "import actormem.runtime.redis.worker\n"
        "from actormem.actors.compression.llm import LLMSummarizer\n"
        "from actormem.actors.recall.embeddings import OpenAIEmbedder\n"
        "print('openai' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _declares_all(path: Path) -> bool:
    for node in ast.parse(path.read_text()).body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign):
            targets = [node.target]
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            return True
    return False


def test_every_public_module_declares_its_names() -> None:
    modules = {name: path for name, path in package_modules().items() if is_public(name)}
    assert "actormem.runtime.errors" in modules
    missing = [name for name, path in sorted(modules.items()) if not _declares_all(path)]
    assert missing == [], f"modules without __all__: {missing}"
