"""The installed package's modules, found through the package-dir mapping."""

from __future__ import annotations

import importlib
from pathlib import Path

#: The import package's root and the repository folders mapped under it.
PACKAGES = ("actormem", "actormem.runtime", "actormem.actors", "actormem.benchmarks")


def package_modules() -> dict[str, Path]:
    """Every module of the installed package, by dotted name."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        root = Path(importlib.import_module(package).__file__ or "").parent
        files = root.glob("*.py") if package == "actormem" else root.rglob("*.py")
        for path in files:
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


def is_public(name: str) -> bool:
    """True when no part of the dotted ``name`` starts with ``_``."""
    return not any(part.startswith("_") for part in name.split("."))
