"""The built wheel is one import package, ``actormem``, and works beside a user's own
``actors.py`` and ``runtime.py``."""

from __future__ import annotations

import shutil
import site
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from tests.support import ROOT

#: The repository's folders that the wheel maps under ``actormem``.
MAPPED = {
    "runtime": "actormem.runtime",
    "actors": "actormem.actors",
    "benchmarks": "actormem.benchmarks",
}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built offline from a copy of the sources (the tree stays clean)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE", "src", *MAPPED):
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif path.exists():
            shutil.copy(path, src / name)
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(out), str(src)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    (built,) = out.glob("actormem-*.whl")
    return built


def test_the_wheel_holds_one_top_level_package_with_every_subpackage(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert top == {"actormem"}
    assert "actormem/py.typed" in names
    # Every package folder of the repository is in the wheel, under its mapped name.
    for folder, package in MAPPED.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            if "__pycache__" in init.parts:
                continue
            inside = init.relative_to(ROOT / folder).as_posix()
            assert f"{package.replace('.', '/')}/{inside}" in names, f"{init} is not packaged"
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "actormem = actormem.runtime.cli:main" in text
    assert "actormem.commands" in text


def test_a_script_beside_its_own_actors_and_runtime_modules_imports_actormem(
    wheel: Path, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    (purelib,) = (venv / "lib").glob("python3.*/site-packages")
    # The wheel alone goes into the fresh venv; its dependencies are borrowed from this
    # one (no network in tests). A path added by a .pth file is not itself a site dir,
    # so this environment's editable install of actormem stays out of sight.
    with zipfile.ZipFile(wheel) as whl:
        whl.extractall(purelib)
    (purelib / "borrowed.pth").write_text("\n".join(site.getsitepackages()) + "\n")

    user = tmp_path / "project"
    user.mkdir()
    (user / "actors.py").write_text("raise SystemExit('the user actors.py was imported')\n")
    (user / "runtime.py").write_text("raise SystemExit('the user runtime.py was imported')\n")
    (user / "main.py").write_text(
        textwrap.dedent(
            """
            import anyio
            import actormem
            from actormem import MemoryRuntime, Message

            async def main() -> None:
                async with MemoryRuntime() as rt:
                    alice = rt.memory("alice")
                    await alice.add(Message(role="user", content="hello from beside actors.py"))
                    ctx = await alice.context(max_tokens=1000)
                    print(actormem.__file__)
                    print(ctx[-1]["content"])

            anyio.run(main)
            """
        )
    )
    run = subprocess.run(
        [str(python), "main.py"], cwd=user, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    where, said = run.stdout.splitlines()
    assert Path(where).is_relative_to(purelib)
    assert said == "hello from beside actors.py"
    # Nothing but actormem (and its dist-info) was added to site-packages by the wheel.
    added = {p.name for p in purelib.iterdir()} - {"borrowed.pth", "__pycache__"}
    assert {n for n in added if not n.endswith(".dist-info")} == {"actormem"}
