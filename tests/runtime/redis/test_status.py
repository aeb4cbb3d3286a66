"""The stored actors of a kind, and one actor's stored state, as ``inspect`` reads
them from Redis."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from actormem.runtime.redis import Keys, RedisConfig, shard_of
from actormem.runtime.redis.status import StoredActor, read_stored_actors, read_stored_state

pytestmark = pytest.mark.anyio


async def test_stored_actors_of_a_kind_and_only_those(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    keys = Keys(redis_config.prefix)
    inner = Keys(f"{redis_config.prefix}:run1")  # a namespace under the prefix
    count = 1_100  # more than one pipeline's worth
    async with redis_client.pipeline(transaction=False) as pipe:
        for i in range(count):
            address = f"memory/a{i}"
            pipe.rpush(keys.actor_log(shard_of(address, redis_config.shards), address), b"m")
        pipe.set(
            keys.actor_snapshot(shard_of("memory/snap", redis_config.shards), "memory/snap"),
            b"12345",
        )
        pipe.rpush(keys.actor_log(shard_of("pool/main", redis_config.shards), "pool/main"), b"x")
        pipe.rpush(inner.actor_log(0, "memory/other"), b"x")
        await pipe.execute()
    found = await read_stored_actors(redis_client, redis_config, "memory")
    assert len(found) == count + 1
    assert {a.address for a in found} == {f"memory/a{i}" for i in range(count)} | {"memory/snap"}
    snap = next(a for a in found if a.address == "memory/snap")
    assert snap == StoredActor("memory/snap", shard_of("memory/snap", redis_config.shards), 0, 5)
    assert {a.log_entries for a in found if a.address != "memory/snap"} == {1}
    assert await read_stored_state(redis_client, redis_config, "memory/snap") == (b"12345", [])
    assert await read_stored_state(redis_client, redis_config, "memory/a0") == (None, [b"m"])
    assert await read_stored_state(redis_client, redis_config, "memory/none") is None
