"""Group commits: a durable actor's changes are stored a batch per call, and the
reply to a command is sent only once its changes are stored."""

from __future__ import annotations

import hashlib
from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis

from runtime.redis import Keys, RedisConfig, _scripts, connect, shard_of
from tests.redis.actors import Add, GetState
from tests.redis.test_transport import worker

pytestmark = pytest.mark.anyio

COMMIT_SHA = hashlib.sha1(_scripts.COMMIT.encode()).hexdigest()


class GatedRedis(aioredis.Redis):
    """A client whose commit calls wait for ``gate`` and are counted."""

    gate: anyio.Event
    commits = 0

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        if args[0] == "EVALSHA" and args[1] == COMMIT_SHA:
            type(self).commits += 1
            await self.gate.wait()
        return await super().execute_command(*args, **options)


def gated(config: RedisConfig) -> GatedRedis:
    client = GatedRedis.from_pool(connect(config).connection_pool)
    client.gate = anyio.Event()
    GatedRedis.commits = 0
    return client


async def test_an_ask_is_answered_only_once_its_changes_are_stored(
    redis_config: RedisConfig, redis_client: aioredis.Redis
) -> None:
    client = gated(redis_config)
    address = "ledger/gated"
    log_key = Keys(redis_config.prefix).agent_log(shard_of(address, redis_config.shards), address)
    try:
        async with worker(client, redis_config) as rt:
            answered: list[int] = []

            async def ask() -> None:
                answered.append(await rt.ref(address).ask(Add("t1", 5)))

            async with anyio.create_task_group() as tg:
                tg.start_soon(ask)
                with anyio.fail_after(10):
                    while not GatedRedis.commits:  # noqa: ASYNC110 (test poll)
                        await anyio.sleep(0.01)
                await anyio.sleep(0.2)
                # Handled, but not stored: no answer yet, nothing in Redis.
                assert answered == []
                assert await redis_client.llen(log_key) == 0
                client.gate.set()
            assert answered == [5]
            assert await redis_client.lrange(log_key, 0, -1) == [b"t1"]
    finally:
        await client.aclose()


async def test_commands_handled_while_a_commit_is_in_flight_share_the_next_one(
    redis_config: RedisConfig, redis_client: aioredis.Redis
) -> None:
    client = gated(redis_config)
    agents = [f"ledger/g{i}" for i in range(5)]
    try:
        async with worker(client, redis_config) as rt:
            await rt.ref(agents[0]).tell(Add("first"))
            with anyio.fail_after(10):
                while not GatedRedis.commits:  # noqa: ASYNC110 (test poll)
                    await anyio.sleep(0.01)
            # The first commit is stuck: everything handled meanwhile queues up.
            for n in range(100):
                await rt.ref(agents[n % 5]).tell(Add(f"t{n}"))
            with anyio.fail_after(10):
                while rt.stats().processed < 101:  # noqa: ASYNC110 (test poll)
                    await anyio.sleep(0.01)
            client.gate.set()
            with anyio.fail_after(10):
                while not rt.transport.settled():  # type: ignore[attr-defined]  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            commits = GatedRedis.commits
            states = [await rt.ref(a).ask(GetState()) for a in agents]
        # Each shard's first call carried what was there when it started, and one
        # more call the rest: 101 commands, two calls per shard at most.
        shards = {shard_of(a, redis_config.shards) for a in agents}
        assert commits <= 2 * len(shards), commits
        assert states[0].tokens == ["first", *(f"t{n}" for n in range(0, 100, 5))]
        for i, state in enumerate(states[1:], 1):
            assert state.tokens == [f"t{n}" for n in range(i, 100, 5)]
    finally:
        await client.aclose()
