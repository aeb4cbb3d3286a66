"""The layout's rules, checked from the code itself: no two files import each other
(except for type hints), the arrows between the rooms point one way, and no module
or class grows past its size limit."""

from __future__ import annotations

import ast
import importlib
import re
import sys
from pathlib import Path

import pytest

from tests.support.modules import package_modules


def _imported_at_run_time(tree: ast.Module) -> set[str]:
    """What a module imports when it is imported: not under ``if TYPE_CHECKING:``, and
    not inside functions (those imports are deferred to the call)."""
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            return
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return names


def _graph() -> dict[str, set[str]]:
    modules = package_modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        imported = _imported_at_run_time(ast.parse(path.read_text()))
        # A module's own packages are imported first by Python itself: no arrow.
        graph[name] = {
            other
            for other in imported
            if other in modules and other != name and not name.startswith(other + ".")
        }
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return circles


def test_no_two_files_import_each_other() -> None:
    assert _circles(_graph()) == []


def test_the_circle_finder_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(graph) == [["a", "b", "c"]]


@pytest.mark.parametrize(
    ("room", "never"),
    [
        ("actormem.runtime", ("actormem.actors", "actormem.benchmarks")),
        ("actormem.actors", ("actormem.benchmarks",)),
    ],
)
def test_the_arrows_between_rooms_point_one_way(room: str, never: tuple[str, ...]) -> None:
    # Deferred imports count here too: a function may not reach into a later room.
    for name, path in package_modules().items():
        if not name.startswith(room + ".") and name != room:
            continue
        every: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                every.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                every.add(node.module)
        wrong = {n for n in every if n.startswith(never)}
        assert not wrong, f"{path} imports {wrong}"


def _room(module: str) -> str:
    """The room a module is in: a repository folder's package, or the root."""
    for room in ("actormem.runtime", "actormem.actors", "actormem.benchmarks"):
        if module == room or module.startswith(room + "."):
            return room
    return "actormem"


def _private(dotted: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in dotted.split("."))


def test_no_room_imports_another_rooms_private_names() -> None:
    # Deferred and type-only imports count too. A private module or name is the
    # room's own; another room imports it from a public module.
    wrong: list[str] = []
    for name, path in package_modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported = [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            wrong += [
                f"{path}:{node.lineno}: {dotted}"
                for dotted in imported
                if dotted.startswith("actormem.")
                and _room(dotted) != _room(name)
                and _private(dotted)
            ]
    assert wrong == []


#: The repository's folders that are subpackages of actormem once installed.
BARE = ("runtime", "actors", "benchmarks")
#: A dotted module path (``-m`` argument, ``module:function`` reference) under a bare name.
_BARE_PATH = re.compile(r"(runtime|actors|benchmarks)((\.(?!py$)\w+)+(:\w+)?|:\w+)")


@pytest.mark.parametrize("bare", BARE)
def test_a_folder_cannot_be_imported_under_its_bare_name(bare: str) -> None:
    # The repository root is on sys.path (for ``tests``): a bare import would load a
    # second copy of every module, with its own error classes.
    with pytest.raises(ModuleNotFoundError, match=f"actormem.{bare}"):
        importlib.import_module(bare)
    copies = [name for name in sys.modules if name.partition(".")[0] == bare]
    assert copies == [], f"bare-name copies in this session: {copies}"


def test_no_test_refers_to_a_folder_by_its_bare_name() -> None:
    wrong: list[str] = []
    for path in sorted(Path(__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                named = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                named = [node.module or ""]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                named = [node.value] if _BARE_PATH.fullmatch(node.value) else []
            else:
                continue
            wrong += [
                f"{path}:{node.lineno}: {name}"
                for name in named
                if name.partition(".")[0].partition(":")[0] in BARE
            ]
    assert wrong == []


#: The most lines a module may hold: past this it usually holds two ideas.
MODULE_LINES = 500
#: Modules still over the limit, each with the lines it may not grow past. The
#: Redis transport and the runtime core are being reshaped (issue 39); a module
#: leaves this list when it is split, and the list only shrinks.
OVERSIZED = {
    "actormem.benchmarks.load": 544,
    "actormem.runtime._dispatch": 543,
    "actormem.runtime._runtime": 566,
    "actormem.runtime.redis._commits": 769,
    "actormem.runtime.redis._handover": 501,
    "actormem.runtime.redis._intake": 609,
    "actormem.runtime.redis.transport": 686,
}


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_no_module_is_over_the_size_limit() -> None:
    sizes = {name: _lines(path) for name, path in package_modules().items()}
    over = {
        name: lines for name, lines in sizes.items() if lines > OVERSIZED.get(name, MODULE_LINES)
    }
    assert over == {}, f"modules over {MODULE_LINES} lines (split them): {over}"


def test_the_list_of_oversized_modules_only_shrinks() -> None:
    # An entry for a module that is gone or back under the limit is removed, so
    # the list never holds room for a module to grow into.
    sizes = {name: _lines(path) for name, path in package_modules().items()}
    stale = {
        name: sizes.get(name)
        for name, limit in OVERSIZED.items()
        if sizes.get(name, 0) <= MODULE_LINES or sizes[name] < limit
    }
    assert stale == {}, f"lower or remove these entries of OVERSIZED: {stale}"


#: The most lines a class may hold.
CLASS_LINES = 300
#: Classes still over the limit, each with the lines it may not grow past; the list
#: only shrinks, as the oversized modules' list does.
OVERSIZED_CLASSES = {
    "actormem.actors.memory.actor.AgentMemory": 350,
    "actormem.actors.memory.handle.MemoryHandle": 444,
    "actormem.actors.memory.store.MessageStore": 419,
    "actormem.actors.pool.actor.PoolActor": 411,
    "actormem.actors.recall.longterm.LongTermMemory": 380,
    "actormem.runtime._dispatch.Dispatcher": 500,
    "actormem.runtime._runtime.Runtime": 480,
    "actormem.runtime.redis._commits.GroupCommit": 591,
    "actormem.runtime.redis._handover.Handover": 314,
    "actormem.runtime.redis._intake.Intake": 540,
    "actormem.runtime.redis.transport.RedisTransport": 533,
}


def _class_sizes() -> dict[str, int]:
    sizes: dict[str, int] = {}
    for name, path in package_modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                sizes[f"{name}.{node.name}"] = node.end_lineno - node.lineno + 1
    return sizes


def test_no_class_is_over_the_size_limit() -> None:
    over = {
        name: lines
        for name, lines in _class_sizes().items()
        if lines > OVERSIZED_CLASSES.get(name, CLASS_LINES)
    }
    assert over == {}, f"classes over {CLASS_LINES} lines (move methods out): {over}"


def test_the_list_of_oversized_classes_only_shrinks() -> None:
    sizes = _class_sizes()
    stale = {
        name: sizes.get(name)
        for name, limit in OVERSIZED_CLASSES.items()
        if sizes.get(name, 0) <= CLASS_LINES or sizes[name] < limit
    }
    assert stale == {}, f"lower or remove these entries of OVERSIZED_CLASSES: {stale}"
