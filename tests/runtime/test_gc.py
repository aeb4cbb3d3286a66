"""The runtime raises the collector's first-generation threshold and freezes what
exists while open; messages are not tracked by the collector."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from actormem.runtime import ConfigError, Runtime, RuntimeConfig
from actormem.runtime.config import decode_config

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def interpreter_default() -> Iterator[None]:
    found = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*found)


async def test_the_threshold_is_raised_while_open_and_put_back_after() -> None:
    async with Runtime(RuntimeConfig(gc_threshold=12_345)):
        assert gc.get_threshold() == (12_345, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


async def test_nested_runtimes_share_it_and_the_last_to_close_puts_it_back() -> None:
    async with Runtime(RuntimeConfig(gc_threshold=5_000)):
        async with Runtime(RuntimeConfig(gc_threshold=9_000)):
            assert gc.get_threshold()[0] == 5_000  # the first one's setting holds
        assert gc.get_threshold()[0] == 5_000
    assert gc.get_threshold() == (700, 10, 10)


async def test_zero_leaves_the_collector_alone_and_a_higher_setting_is_kept() -> None:
    async with Runtime(RuntimeConfig(gc_threshold=0)):
        assert gc.get_threshold() == (700, 10, 10)
    gc.set_threshold(50_000, 10, 10)
    async with Runtime(RuntimeConfig(gc_threshold=10_000)):
        assert gc.get_threshold()[0] == 50_000
    assert gc.get_threshold()[0] == 50_000


async def test_a_setting_changed_while_open_is_not_overwritten_at_close() -> None:
    async with Runtime(RuntimeConfig(gc_threshold=10_000)):
        gc.set_threshold(2_000, 10, 10)
    assert gc.get_threshold() == (2_000, 10, 10)


def test_a_negative_threshold_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="gc_threshold"):
        decode_config({"gc_threshold": -1}, RuntimeConfig, source="test")


async def test_what_exists_at_open_is_frozen_until_the_last_runtime_closes() -> None:
    assert gc.get_freeze_count() == 0
    async with Runtime(RuntimeConfig()):
        frozen = gc.get_freeze_count()
        assert frozen > 0
        # A frozen object that is freed leaves the permanent generation, so the count
        # may fall; a second freeze would add what was made since the first.
        async with Runtime(RuntimeConfig()):
            assert 0 < gc.get_freeze_count() <= frozen
        assert 0 < gc.get_freeze_count() <= frozen
    assert gc.get_freeze_count() == 0


async def test_gc_freeze_false_freezes_nothing() -> None:
    async with Runtime(RuntimeConfig(gc_freeze=False)):
        assert gc.get_freeze_count() == 0
    async with Runtime(RuntimeConfig(gc_threshold=0, gc_freeze=False)):
        assert gc.get_threshold() == (700, 10, 10)


def test_messages_are_not_tracked_by_the_collector() -> None:
    from actormem.actors import Message
    from actormem.actors.messages import ToolCall

    call = ToolCall(id="c1", name="f", arguments="{}")
    message = Message(role="assistant", content=None, tool_calls=(call,), metadata={"a": [1]})
    assert not gc.is_tracked(message)
    assert not gc.is_tracked(call)


def test_collections_records_each_collection_while_started() -> None:
    from actormem.runtime.collector import Collections

    with Collections() as record:
        gc.collect(1)
        cycle: list[object] = []
        cycle.append(cycle)
        del cycle
        gc.collect()
    gc.collect()  # stopped: not recorded
    first, second = record.collections
    assert (first.generation, second.generation) == (1, 2)
    assert second.collected >= 1  # the list that held itself
    assert first.ended <= second.ended
    assert all(c.pause >= 0 for c in record.collections)
    assert record.during(second.ended, second.ended + 1) == [second]
    assert record._callback not in gc.callbacks


def test_collections_are_written_and_read_back(tmp_path: Path) -> None:
    from actormem.runtime.collector import Collections

    with Collections() as record:
        gc.collect(0)
    record.dump(tmp_path / "gc.msgpack")
    assert Collections.load(tmp_path / "gc.msgpack").collections == record.collections


@pytest.mark.slow
def test_a_process_started_with_the_record_env_writes_its_collections_at_exit(
    tmp_path: Path,
) -> None:
    from actormem.runtime.collector import RECORD_ENV, Collections

    script = (
        "import anyio, gc\n"
        "from actormem.runtime import Runtime, RuntimeConfig\n"
        "async def main():\n"
        "    async with Runtime(RuntimeConfig()):\n"
        "        gc.collect()\n"
        "anyio.run(main)\n"
        "print(__import__('os').getpid())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, RECORD_ENV: str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    pid = int(done.stdout.split()[-1])
    record = Collections.load(tmp_path / f"gc-{pid}.msgpack")
    assert 2 in [c.generation for c in record.collections]
