"""Reload ids: the same for the same agent and view version (a replayed run sees the
same hints), and never the same twice for one agent, across restarts over Redis."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from actormem.actors import AppConfig, MemoryRuntime
from actormem.actors.compression import CompressionConfig, OfflineSummarizer, compress
from actormem.actors.compression.draft import reload_id
from actormem.runtime.redis.transport import RedisTransport
from actormem.runtime.tokens import get_counter
from tests.actors.compression.test_engine import long_conversation
from tests.actors.memory.test_compression_memory import small, turn, wait_idle

pytestmark = pytest.mark.anyio


async def _offload_ids(agent: str, version: int) -> list[str]:
    counter = get_counter()
    outcome = await compress(
        long_conversation(8),
        config=CompressionConfig(msg_threshold=20, max_tokens=4000),
        counter=counter,
        summarizer=OfflineSummarizer(counter),
        version=version,
        agent=agent,
    )
    return list(outcome.offloaded)


async def test_the_same_agent_and_version_make_the_same_reload_ids() -> None:
    first = await _offload_ids("Ada", 3)
    assert first and first == await _offload_ids("Ada", 3)
    assert first == [reload_id("Ada", 3, n) for n in range(1, len(first) + 1)]
    assert set(first).isdisjoint(await _offload_ids("Ada", 4))
    assert set(first).isdisjoint(await _offload_ids("Bram", 3))
    # Without an agent, the ids are unique ones.
    assert set(await _offload_ids("", 3)).isdisjoint(await _offload_ids("", 3))


def _referenced(view: list[object]) -> list[str]:
    ids = []
    for m in view:
        metadata = m.metadata  # type: ignore[attr-defined]
        ids += [metadata[k] for k in ("reload_id", "offloaded") if k in metadata]
    return ids


async def test_reload_ids_stay_unique_when_a_memory_comes_back_over_redis(
    make_redis_transport: Callable[[], RedisTransport],
) -> None:
    config: AppConfig = small(msg_threshold=12, last_keep=4)
    made: list[str] = []
    for restart in range(2):
        async with MemoryRuntime(config, transport=make_redis_transport()) as rt:
            mem = rt.memory("ana")
            if restart == 0:
                await mem.add({"role": "system", "content": "You are Ana."})
            for i in range(12):
                await mem.add(turn(100 * restart + i))
                await wait_idle(mem)
            summary = await mem.set_summary(
                "Ana talked about the mill.", replaces=[m.id for m in (await mem.get())[-2:]]
            )
            view = await mem.get()
            made += [i for i in _referenced(view) if i not in made]
            for ident in _referenced(view):
                assert await mem.reload(ident), ident
    assert summary.metadata["reload_id"] in made
    # The memory came back at the version it had: its new ids come after the old ones.
    versions = [int(i.split(".")[1]) for i in made]
    assert len(set(made)) == len(made) and versions == sorted(versions)
