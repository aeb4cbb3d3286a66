"""Compression inside a memory with the town-small settings: calls without results
and orphan results never stop it; a memory that cannot be compressed says so once."""

from __future__ import annotations

import anyio
import msgspec
import pytest
from structlog.testing import capture_logs

from actormem.actors import AppConfig, MemoryRuntime, Message, ToolCall, check_openai_messages
from actormem.actors.compression._layout import sendable
from actormem.actors.memory.handle import MemoryHandle
from tests.actors.compression._build import chatter, town_small

pytestmark = pytest.mark.anyio


def app() -> AppConfig:
    return AppConfig(compression=town_small())


async def wait_idle(mem: MemoryHandle) -> None:
    with anyio.fail_after(20):
        while (await mem.stats()).compressing:  # noqa: ASYNC110
            await anyio.sleep(0.005)


async def test_an_unanswered_call_and_an_orphan_do_not_stop_compression() -> None:
    config = town_small()
    async with MemoryRuntime(app()) as rt:
        mem = rt.memory("ivo")
        with capture_logs() as logs:
            await mem.add({"role": "system", "content": "You are Ivo, the ferryman."})
            await mem.add({"role": "user", "content": "Check the tide table."})
            await mem.add(
                Message(role="assistant", tool_calls=(ToolCall("lost", "tide_table", "{}"),))
            )
            orphan = "tide rows " + chatter(60)
            await mem.add({"role": "tool", "tool_call_id": "gone", "content": orphan})
            for i in range(120):
                role = "user" if i % 2 == 0 else "assistant"
                await mem.add({"role": role, "content": f"line {i}: " + chatter(2)})
                await wait_idle(mem)
        stats = await mem.stats()
        view = await mem.get()
    assert stats.compressions >= 1 and stats.tokens_saved > 0
    assert len(view) <= config.msg_threshold
    assert sum(m.tokens for m in view) <= config.token_limit
    assert all(m.text() != orphan for m in view)  # the 7 KB-style orphan was compressed
    assert check_openai_messages([m.to_openai() for m in sendable(view)]) == []
    assert not [e for e in logs if e["log_level"] in ("warning", "error")], logs
    assert stats.history_size == 124  # the original history is untouched


async def test_a_memory_that_cannot_be_compressed_says_so_once_and_backs_off() -> None:
    config = msgspec.structs.replace(town_small(), msg_threshold=4)
    async with MemoryRuntime(AppConfig(compression=config)) as rt:
        mem = rt.memory("pia")
        with capture_logs() as logs:
            for i in range(40):
                await mem.add(Message(role="user", content=f"rule {i}", metadata={"pinned": True}))
                await wait_idle(mem)
    stuck = [e for e in logs if e["event"] == "compression_stuck"]
    assert len(stuck) == 1 and "protected" in stuck[0]["note"]
    asked = [e for e in logs if e["event"] == "compression_noop"]
    # Every add past the threshold would ask; waiting twice as long after each
    # fruitless compression asks a handful of times.
    assert 1 <= len(asked) <= 8
