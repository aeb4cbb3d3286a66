"""Erasure in the Redis transport: a durable actor whose changes say ``erase``
loses its stored state and the stream entries and dead letters of its commands
so far, and nothing else: not its later commands, not its shard neighbours'."""

from __future__ import annotations

import anyio
import msgspec
import pytest
import redis.asyncio as aioredis

from actormem.runtime.redis import RedisConfig
from actormem.runtime.redis.keys import Keys, shard_of
from tests.runtime.redis.test_transport import worker
from tests.support.actors import Add, Erase, GetState
from tests.support.redis import keys_holding

pytestmark = pytest.mark.anyio


def neighbour(address: str, shards: int) -> str:
    """Another ledger address on the same shard as ``address``."""
    shard = shard_of(address, shards)
    return next(f"ledger/n{i}" for i in range(1000) if shard_of(f"ledger/n{i}", shards) == shard)


async def test_an_erasing_command_removes_the_actors_past_and_nothing_else(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    keys = Keys(redis_config.prefix)
    target, other = "ledger/target", neighbour("ledger/target", redis_config.shards)
    shard = shard_of(target, redis_config.shards)
    async with worker(redis_client, redis_config) as rt:
        for i in range(5):
            await rt.ref(target).ask(Add(f"secret-{i}"))
            await rt.ref(other).ask(Add(f"kept-{i}"))
        # A dead letter for each: a tell whose body fails validation.
        for address, token in ((target, "secret-dead"), (other, "kept-dead")):
            body = {"type": "ledger.Add", "token": token, "amount": "not an int"}
            envelope = msgspec.msgpack.encode({"recipient": address, "body": body})
            await redis_client.xadd(keys.stream(shard), {b"e": envelope})
        with anyio.fail_after(10):
            while await redis_client.xlen(keys.dead_letters()) < 2:  # noqa: ASYNC110
                await anyio.sleep(0.02)
        assert await keys_holding(redis_client, redis_config.prefix, b"secret-")
        assert await rt.ref(target).ask(Erase()) == 0
        assert not await redis_client.exists(
            keys.actor_log(shard, target), keys.actor_snapshot(shard, target)
        )
        after = [await rt.ref(target).ask(Add(f"after-{i}")) for i in range(3)]
        assert after == [1, 2, 3]
        assert await keys_holding(redis_client, redis_config.prefix, b"secret-") == []
        assert await keys_holding(redis_client, redis_config.prefix, b"kept-dead")
    async with worker(redis_client, redis_config) as rt:  # reloaded from what is stored
        state = await rt.ref(target).ask(GetState())
        assert (state.tokens, state.total) == ([f"after-{i}" for i in range(3)], 3)
        state = await rt.ref(other).ask(GetState())
        assert state.tokens == [f"kept-{i}" for i in range(5)]
