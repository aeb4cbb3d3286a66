"""Each package's declared public surface is exactly what it exports."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize(
    "name", ["actormem", "actormem.runtime", "actormem.actors", "actormem.runtime.transports"]
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
    import subprocess
    import sys

    code = (
        "import sys, actormem.actors.app.wiring, actormem.actors.app.cli\n"
        "import actormem.runtime.redis.worker\n"
        "from actormem.actors.compression.llm import LLMSummarizer\n"
        "from actormem.actors.recall.embeddings import OpenAIEmbedder\n"
        "print('openai' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
