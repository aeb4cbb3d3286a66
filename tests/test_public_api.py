"""Each package's declared public surface is exactly what it exports."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize("name", ["runtime", "actors", "runtime.transports"])
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


def test_runtime_never_imports_actors() -> None:
    import pathlib

    root = pathlib.Path(importlib.import_module("runtime").__file__).parent
    for path in root.rglob("*.py"):
        text = path.read_text()
        assert "from actors" not in text and "import actors" not in text, path
