"""Corrupt durable state in Redis: the agent's calls fail clearly, the others carry on.

A snapshot or history entry that no longer decodes (a bad restore, a bug in an
older version, a hand edit) must not take the worker down or leak into another
agent: asks to that agent fail with an error naming the decode failure, and
every other agent is served with nothing lost (the history checker).
"""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from actormem.actors import AppConfig, MemoryRuntime, Message
from actormem.runtime import HandlerError
from actormem.runtime.redis import Keys, RedisConfig, shard_of
from actormem.runtime.redis.transport import RedisTransport
from tests.faults.report import Recorder
from tests.support.history import History, observe_memory

pytestmark = [pytest.mark.faults, pytest.mark.anyio]


def worker(config: RedisConfig) -> MemoryRuntime:
    return MemoryRuntime(AppConfig(), transport=RedisTransport(config.url, config))


@pytest.mark.parametrize("part", ["snapshot", "history"])
async def test_an_agent_whose_stored_state_is_corrupt_fails_alone_and_clearly(
    part: str, redis_config: RedisConfig, redis_client: aioredis.Redis, fault_report: Recorder
) -> None:
    history = History()
    agents = ["broken", "fine"]

    async def add(rt: MemoryRuntime, agent: str, text: str) -> None:
        message = Message(role="user", content=text)
        if agent == "fine":  # the broken agent's history cannot be read back
            history.message(agent, message)
        await rt.memory(agent).add(message)

    async with MemoryRuntime(
        AppConfig(), transport=RedisTransport(redis_config.url, redis_config)
    ) as rt:
        for agent in agents:
            await add(rt, agent, f"{agent} before")
    keys = Keys(redis_config.prefix)
    shard = shard_of("memory/broken", redis_config.shards)
    if part == "snapshot":
        await redis_client.set(keys.actor_snapshot(shard, "memory/broken"), b"\xc1not msgpack")
    else:
        await redis_client.rpush(keys.actor_log(shard, "memory/broken"), b"\xc1not msgpack")

    async with MemoryRuntime(
        AppConfig(), transport=RedisTransport(redis_config.url, redis_config)
    ) as rt:
        with pytest.raises(HandlerError, match=r"Get failed: .*MessagePack data is malformed"):
            await rt.memory("broken").get()
        await add(rt, "fine", "fine after")
        verdict = history.check(await observe_memory(rt, ["fine"]))
    fault_report.row(f"another agent's stored {part} corrupt", "2 agents", verdict)
    assert verdict.ok, str(verdict)
    assert verdict.applied == 2
