"""export() to a path: folders created, the caller's extra kept through read and load."""

from __future__ import annotations

from pathlib import Path

import pytest

from actormem import MemoryRuntime
from actormem.actors.errors import MemoryInputError
from actormem.actors.memory.handle import read_export

pytestmark = pytest.mark.anyio


async def test_export_creates_its_folders_and_carries_extra(
    memory_rt: MemoryRuntime, tmp_path: Path
) -> None:
    alice = memory_rt.memory("alice")
    await alice.add([{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}])
    path = tmp_path / "runs" / "7" / "alice.json"
    extra = {"run": 7, "scenario": "town", "tags": ["a", "b"]}
    data = await alice.export(path, extra=extra)
    assert data.extra == extra
    back = read_export(path)
    assert back.extra == extra and back.working == data.working

    bob = memory_rt.memory("bob")
    assert await bob.load(path) == 2
    assert [m.content for m in await bob.get()] == ["hello", "hi"]
    assert (await bob.export()).extra == {}  # the memory keeps messages, not extra


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        ({1: "x"}, "extra must be a dict with string keys"),
        ("run 7", "extra must be a dict with string keys"),
        ({"when": object()}, "extra must be JSON-able"),
    ],
)
async def test_bad_extra_is_refused_and_nothing_is_written(
    memory_rt: MemoryRuntime, tmp_path: Path, extra: object, match: str
) -> None:
    alice = memory_rt.memory("alice")
    await alice.add({"role": "user", "content": "hello"})
    path = tmp_path / "out" / "alice.json"
    with pytest.raises(MemoryInputError, match=match):
        await alice.export(path, extra=extra)  # type: ignore[arg-type]
    assert not path.exists()
