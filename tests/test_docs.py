"""The README and docs/ say what the software is: every config key is documented,
every path, ``make`` target, command and module they name exists, every config in
configs/ loads, and their Python examples run as printed."""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import re
import subprocess
import sys
import typing
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from actormem.actors.config import AppConfig, load_app_config
from tests.support import ROOT

README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").rglob("*.md"))
PAGES = [README, *DOCS]
CONFIG_PAGE = ROOT / "docs" / "configuration.md"
README_MAX_LINES = 350

#: The repository's top-level folders and files a page may name by path.
TOP_FOLDERS = ("runtime", "actors", "benchmarks", "configs", "docs", "tests", "src")
TOP_FILES = ("README.md", "CHANGELOG.md", "LICENSE", "Makefile", "pyproject.toml")
#: Dotted names in the pages that are not modules (an entry-point group).
NOT_MODULES = frozenset({"actormem.commands"})


def text(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def code_spans(page: Path) -> Iterator[str]:
    """Inline code spans and the lines of fenced code blocks."""
    body = text(page)
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", body, re.S | re.M):
        yield from block.splitlines()
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", body, flags=re.S | re.M)
    for span in re.findall(r"`([^`]+)`", prose):
        yield " ".join(span.split())  # a span may wrap across lines


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text(page), re.S | re.M)


# -- the configuration reference ------------------------------------------------------------


def section_type(kind: object) -> type[msgspec.Struct] | None:
    """The Struct a field holds, when it is a section (``X`` or an optional ``X | None``)."""
    choices = [k for k in typing.get_args(kind) if k is not type(None)] or [kind]
    if (
        len(choices) == 1
        and isinstance(choices[0], type)
        and issubclass(choices[0], msgspec.Struct)
    ):
        return choices[0]
    return None


def config_keys(cls: type[msgspec.Struct], prefix: str) -> Iterator[tuple[str, str]]:
    """(section, key) for every field of ``cls``, nested sections by their dotted name."""
    hints = typing.get_type_hints(cls)
    for name in cls.__struct_fields__:
        kind = section_type(hints[name])
        if kind is not None:
            yield from config_keys(kind, f"{prefix}.{name}" if prefix else name)
        elif prefix:
            yield prefix, name


def config_structs(cls: type[msgspec.Struct]) -> Iterator[type[msgspec.Struct]]:
    yield cls
    for hint in typing.get_type_hints(cls).values():
        if (kind := section_type(hint)) is not None:
            yield from config_structs(kind)


def documented_keys() -> set[tuple[str, str]]:
    """(section, key) of every row under a ``## [section]`` heading of the reference."""
    keys: set[tuple[str, str]] = set()
    section = None
    for line in text(CONFIG_PAGE).splitlines():
        if line.startswith("## "):
            heading = re.fullmatch(r"## \[([\w.]+)\]", line)
            section = heading.group(1) if heading else None
        elif section and (row := re.match(r"\| `(\w+)` \|", line)):
            keys.add((section, row.group(1)))
    return keys


def test_every_config_key_is_documented() -> None:
    keys = set(config_keys(AppConfig, ""))
    documented = documented_keys()
    assert not keys - documented, f"missing from docs/configuration.md: {sorted(keys - documented)}"
    assert not documented - keys, f"not config keys: {sorted(documented - keys)}"


def test_every_config_struct_is_a_section_of_the_app_config() -> None:
    """A config Struct (``*Config``, unknown keys refused) that AppConfig does not
    reach would be missing from the reference."""
    reached = set(config_structs(AppConfig))
    found = set()
    for package in ("actormem.runtime", "actormem.actors"):
        root = importlib.import_module(package)
        for path in Path(root.__path__[0]).rglob("*.py"):
            relative = path.relative_to(root.__path__[0]).with_suffix("")
            parts = [p for p in relative.parts if p != "__init__"]
            if parts and parts[-1] == "__main__":
                continue
            module = importlib.import_module(".".join([package, *parts]))
            for value in vars(module).values():
                if (
                    isinstance(value, type)
                    and issubclass(value, msgspec.Struct)
                    and value.__module__ == module.__name__
                    and value.__name__.endswith("Config")
                    and value.__struct_config__.forbid_unknown_fields
                ):
                    found.add(value)
    assert found, "no config Structs found"
    assert not found - reached, f"not reachable from AppConfig: {found - reached}"


# -- configs/ -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.toml")), ids=lambda p: p.name)
def test_every_config_file_loads(path: Path) -> None:
    load_app_config(path)


# -- the README -----------------------------------------------------------------------------


def test_the_readme_is_short() -> None:
    lines = len(text(README).splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES})"


def test_the_embedding_example_runs() -> None:
    section = text(README).split("## Embedding the runtime", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code, "no Python example under 'Embedding the runtime'"
    proc = subprocess.run(
        [sys.executable, "-c", code.group(1)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    n_messages, n_hits, tokens = proc.stdout.split()
    assert int(n_messages) == 5 and int(n_hits) == 2 and int(tokens) > 0


def test_the_runtime_example_runs() -> None:
    code = python_blocks(ROOT / "docs" / "architecture.md")[0]
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "hi"


# -- what the pages name exists -------------------------------------------------------------


def named_paths(page: Path) -> set[str]:
    """Repository paths a page names: in code spans, and as relative link targets."""
    folders = "|".join(TOP_FOLDERS)
    files = "|".join(re.escape(f) for f in TOP_FILES)
    pattern = re.compile(rf"(?<![\w./-])((?:{folders})/[\w./-]*[\w/]|(?:{files})(?![\w.]))")
    paths: set[str] = set()
    for span in code_spans(page):
        paths.update(pattern.findall(span))
    for target in re.findall(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)", text(page)):
        paths.add(str((page.parent / target).resolve().relative_to(ROOT)))
    return paths


def layout_paths(page: Path) -> set[str]:
    """The files of a layout tree (a code block whose first line is ``runtime/``): a
    top folder at column 0, then lines of ``sub/`` folders and ``*.py`` files, where
    a line indented deeper than two spaces continues the last subfolder's list."""
    paths: set[str] = set()
    for block in re.findall(r"^```\n(.*?)^```", text(page), re.S | re.M):
        if not block.startswith(f"{TOP_FOLDERS[0]}/"):
            continue
        top = sub = ""
        for line in block.splitlines():
            words = line.split()
            if not line.startswith(" "):
                top, sub = words[0], ""
                words = words[1:]
            elif not line.startswith("   "):
                sub = ""
            for word in words:
                if word.endswith("/"):
                    sub = word
                    paths.add(top + sub)
                elif word.endswith(".py"):
                    paths.add(top + sub + word)
    return paths


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_named_paths_exist(page: Path) -> None:
    named = named_paths(page) | layout_paths(page)
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert not missing, f"{page.name} names paths that do not exist: {missing}"


def make_targets() -> set[str]:
    return set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_named_make_targets_exist(page: Path) -> None:
    named = {m for span in code_spans(page) for m in re.findall(r"\bmake ([\w-]+)", span)}
    missing = sorted(named - make_targets())
    assert not missing, f"{page.name} names make targets the Makefile lacks: {missing}"


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def options(parser: argparse.ArgumentParser) -> set[str]:
    return set(parser._option_string_actions)


def command_lines(page: Path) -> Iterator[list[str]]:
    """The ``actormem ...`` and ``python -m actormem.benchmarks ...`` commands a page
    shows, as words (placeholders such as NAME or [options] included)."""
    command = re.compile(
        r"^(?:\$ )?(?:[A-Z_]+=\S+ )*(actormem|python -m actormem\.benchmarks)((?: [^#|;]*)?)"
    )
    for span in code_spans(page):
        if match := command.match(span.strip()):
            words = match.group(2).split()
            if match.group(1) != "actormem":
                words = ["bench", *words]
            yield words


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_named_commands_exist(page: Path) -> None:
    from actormem.benchmarks.__main__ import build_parser as bench_parser
    from actormem.runtime.cli import parser as cli_parser

    top = cli_parser()
    commands = subparsers(top)
    benchmarks = subparsers(bench_parser())
    wrong = []
    for words in command_lines(page):
        line = " ".join(["actormem", *words])
        flags = [w.split("=")[0] for w in words if w.startswith("--")]
        given = [w for w in words if not w.startswith("-")]
        if not given or given[0] not in commands:
            if given and re.fullmatch(r"[a-z_]+", given[0]):
                wrong.append(f"{line}: no command {given[0]!r}")
            continue
        accepted = options(top) | options(commands[given[0]])
        if given[0] == "bench" and len(given) > 1 and given[1] != "NAME":
            if given[1] not in benchmarks:
                wrong.append(f"{line}: no benchmark {given[1]!r}")
                continue
            accepted |= options(benchmarks[given[1]])
        elif given[0] == "bench":
            accepted |= {"--help", "--out", "--plot"}
        wrong += [f"{line}: no option {flag}" for flag in flags if flag not in accepted]
    assert not wrong, "\n".join(wrong)


def module_exists(dotted: str) -> bool:
    """``dotted`` names a module, or an attribute of one."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        name = ".".join(parts[:cut])
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:
            found = False
        if found:
            obj: object = importlib.import_module(name)
            for attr in parts[cut:]:
                if not hasattr(obj, attr):
                    return False
                obj = getattr(obj, attr)
            return True
    return False


def named_modules(page: Path) -> set[str]:
    names = set()
    for span in code_spans(page):
        names.update(re.findall(r"\bactormem(?:\.\w+)+", span))
    for block in python_blocks(page):
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.ImportFrom) and node.module:
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
    return {n for n in names if n.startswith("actormem")} - NOT_MODULES


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_named_modules_exist(page: Path) -> None:
    missing = sorted(n for n in named_modules(page) if not module_exists(n))
    assert not missing, f"{page.name} names modules or names that do not exist: {missing}"
