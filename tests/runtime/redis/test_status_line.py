"""The backlog a worker's status line reports: its shards' lag and pending entries,
read from their consumer groups."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import redis.asyncio as aioredis

from actormem.runtime.redis import CONSUMER_GROUP, Keys, RedisConfig
from actormem.runtime.redis._status_line import backlog

pytestmark = pytest.mark.anyio


def holding(client: aioredis.Redis, config: RedisConfig, *shards: int) -> Any:
    """What ``backlog`` reads of a worker transport that owns ``shards``."""
    return SimpleNamespace(
        client=client, keys=Keys(config.prefix), owned_shards=lambda: list(shards)
    )


async def test_lag_and_pending_of_the_owned_shards_only(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    keys = Keys(redis_config.prefix)
    for shard, entries in ((0, 3), (1, 2), (2, 5)):
        stream = keys.stream(shard)
        await redis_client.xgroup_create(stream, CONSUMER_GROUP, id="0", mkstream=True)
        for i in range(entries):
            await redis_client.xadd(stream, {b"e": str(i).encode()})
    # One entry of shard 0 read (pending), the other two not yet (lag).
    await redis_client.xreadgroup(CONSUMER_GROUP, "w", {keys.stream(0): ">"}, count=1)
    assert await backlog(holding(redis_client, redis_config, 0, 1, 3)) == (4, 1)
    assert await backlog(holding(redis_client, redis_config)) == (0, 0)
