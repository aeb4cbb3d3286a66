"""Shard leases: one worker's heartbeat renews what it holds and drops what it lost."""

from __future__ import annotations

import msgspec
import pytest
import redis.asyncio as aioredis

from actormem.runtime.redis import Keys, RedisConfig
from actormem.runtime.redis._leases import LeaseManager
from tests.support.redis import prefixed_client

pytestmark = pytest.mark.anyio


async def test_one_heartbeat_renews_every_held_lease_and_drops_only_the_lost_one(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    await _renews_all_but_the_lost(redis_client, Keys(redis_config.prefix))


@pytest.mark.slow
async def test_leases_on_many_cluster_nodes_are_renewed_together(
    redis_cluster_url: str, redis_config: RedisConfig
) -> None:
    config = msgspec.structs.replace(redis_config, url=redis_cluster_url, cluster=True)
    async with prefixed_client(config) as client:
        await _renews_all_but_the_lost(client, Keys(config.prefix))


async def _renews_all_but_the_lost(redis_client: aioredis.Redis, keys: Keys) -> None:
    shards, lease_ms = 8, 5_000
    gained: list[int] = []
    lost: list[tuple[list[int], bool]] = []

    async def on_gained(shard: int, _lease: str) -> None:
        gained.append(shard)

    async def on_lost(numbers: list[int], released: bool) -> None:
        lost.append((numbers, released))

    leases = LeaseManager(redis_client, keys, "w1", shards, lease_ms, on_gained, on_lost)
    await leases.heartbeat()
    assert sorted(gained) == list(range(shards))
    # Another worker takes shard 3 over; the others' leases run low.
    await redis_client.set(keys.lease(3), "999:someone-else")
    for shard in range(shards):
        if shard != 3:
            await redis_client.pexpire(keys.lease(shard), 100)
    await leases.heartbeat()
    assert lost == [([3], False)]
    assert sorted(leases.owned) == [s for s in range(shards) if s != 3]
    for shard in leases.owned:
        assert leases.fresh(shard)
        assert await redis_client.pttl(keys.lease(shard)) > 1_000
    assert await redis_client.get(keys.lease(3)) == b"999:someone-else"
    assert not leases.fresh(3)
