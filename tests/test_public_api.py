"""Each package's declared public surface is exactly what it exports."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import actormem
from tests.support.modules import is_public, package_modules
from tests.support.processes import printed

#: The packages whose ``__all__`` is the surface users import from.
SURFACES = (
    "actormem",
    "actormem.runtime",
    "actormem.actors",
    "actormem.runtime.transports",
    "actormem.runtime.redis",
)


@pytest.mark.parametrize("name", SURFACES)
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
    out = printed(code)
    assert out.strip() == "False"


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


def test_every_catchable_error_is_exported_from_actormem() -> None:
    # Every module of the runtime and the domain is imported (in a child, so this
    # session keeps its modules), and each error class found must be in actormem.
    code = (
        "import importlib, json, pkgutil\n"
        "import actormem.actors, actormem.runtime\n"
        "from actormem.runtime.errors import ActormemError\n"
        "for package in (actormem.runtime, actormem.actors):\n"
        "    for info in pkgutil.walk_packages(package.__path__, package.__name__ + '.'):\n"
        "        importlib.import_module(info.name)\n"
        "def below(cls):\n"
        "    for sub in cls.__subclasses__():\n"
        "        yield sub\n"
        "        yield from below(sub)\n"
        "print(json.dumps(sorted({(c.__module__, c.__name__) for c in below(ActormemError)})))"
    )
    out = printed(code)
    found = [(module, name) for module, name in json.loads(out)]
    assert ("actormem.runtime.errors", "TransportUnavailableError") in found
    missing = [
        f"{module}.{name}"
        for module, name in found
        if module.startswith(("actormem.runtime", "actormem.actors"))
        and (name not in actormem.__all__ or getattr(actormem, name).__module__ != module)
    ]
    assert missing == [], f"errors missing from actormem.__all__: {missing}"


def test_no_redis_module_is_loaded_until_the_redis_transport_is_used() -> None:
    # An in-process user pays for neither redis-py nor the Redis transport.
    code = (
        "import sys, anyio, actormem\n"
        "def redis_modules():\n"
        "    return sorted(m for m in sys.modules if m.partition('.')[0] == 'redis'\n"
        "                  or (m + '.').startswith('actormem.runtime.redis.'))\n"
        "print(redis_modules())\n"
        "async def main():\n"
        "    async with actormem.MemoryRuntime() as rt:\n"
        "        await rt.memory('alice').add({'role': 'user', 'content': 'hello'})\n"
        "anyio.run(main)\n"
        "print(redis_modules())\n"
        "import actormem.runtime.redis\n"
        "print(redis_modules()[:1])\n"
    )
    out = printed(code)
    after_import, after_use, after_redis = out.splitlines()
    assert after_import == "[]"
    assert after_use == "[]"
    assert after_redis != "[]"


def _uses_every_public_name() -> list[str]:
    """One import line per name of each surface's ``__all__``, as a user writes it."""
    lines = []
    for surface in SURFACES:
        names = importlib.import_module(surface).__all__
        alias = surface.replace(".", "_")
        lines += [f"from {surface} import {name} as {alias}_{name}" for name in sorted(names)]
    return lines


def _mypy(tmp_path: Path, lines: list[str]) -> subprocess.CompletedProcess[str]:
    """mypy --strict on ``lines``, run where only the installed package is found."""
    (tmp_path / "uses.py").write_text("\n".join(lines) + "\n")
    command = [sys.executable, "-m", "mypy", "--config-file=", "--strict"]
    command += ["--follow-imports=silent", "--cache-dir", str(tmp_path / "cache"), "uses.py"]
    return subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, check=False)


@pytest.mark.slow
def test_mypy_resolves_every_public_name(tmp_path: Path) -> None:
    # A user's type checker finds the package through the package-dir mapping
    # (the folders are subpackages of actormem), and --strict allows only names
    # a module exports on purpose.
    lines = _uses_every_public_name()
    found = _mypy(tmp_path, lines)
    assert found.returncode == 0, found.stdout + found.stderr
    assert "Success: no issues found in 1 source file" in found.stdout
    # The same run fails on a name that is not there, so it did look at each one.
    missing = _mypy(tmp_path, [lines[0], "from actormem import NoSuchName"])
    assert missing.returncode == 1
    assert 'Module "actormem" has no attribute "NoSuchName"' in missing.stdout


@pytest.mark.slow
def test_pyright_resolves_every_public_name(tmp_path: Path) -> None:
    lines = [*_uses_every_public_name(), "from actormem import NoSuchName"]
    (tmp_path / "uses.py").write_text("\n".join(lines) + "\n")
    command = [sys.executable, "-m", "pyright", "--pythonpath", sys.executable]
    command += ["--outputjson", "uses.py"]
    run = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, check=False)
    report = json.loads(run.stdout)
    errors = [d["message"] for d in report["generalDiagnostics"] if d["severity"] == "error"]
    # Only the name that is not there is unknown.
    assert errors == ['"NoSuchName" is unknown import symbol'], errors
