"""The runtime raises the collector's first-generation threshold and freezes what
exists while open; messages are not tracked by the collector."""

from __future__ import annotations

import gc
from collections.abc import Iterator

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
