"""Counting and clearing a namespace touch its own keys and no other, on one server
and on a Redis Cluster (keys of every slot)."""

from __future__ import annotations

import msgspec
import pytest
import redis.asyncio as aioredis

from actormem.runtime.redis import Keys, RedisConfig, clear_prefix, connect, count_prefix
from tests.support.redis import delete_prefix

pytestmark = pytest.mark.anyio


def some_keys(prefix: str, count: int = 40) -> list[str]:
    """Keys of ``prefix`` spread over many hash tags (so many cluster slots)."""
    keys = Keys(prefix)
    return [keys.actor_log(i, f"memory/a{i}") for i in range(count)] + [keys.workers()]


async def fill(client: aioredis.Redis, keys: list[str]) -> None:
    for key in keys:
        await client.set(key, b"x")


async def existing(client: aioredis.Redis, keys: list[str]) -> int:
    return sum([int(await client.exists(key)) for key in keys])


async def check_only_its_own(config: RedisConfig) -> None:
    run, neighbour, longer = (config.namespaced(n) for n in ("run", "run2", "run.x"))
    mine = some_keys(run.prefix, 1200)  # more than one SCAN and UNLINK batch
    others = some_keys(neighbour.prefix) + some_keys(longer.prefix) + some_keys(config.prefix)
    client = connect(config)
    try:
        await fill(client, mine + others)
        assert await count_prefix(run) == len(mine)
        assert await clear_prefix(run) == len(mine)
        assert await existing(client, mine) == 0
        assert await existing(client, others) == len(others)
        assert await count_prefix(run) == 0
        assert await clear_prefix(run) == 0
    finally:
        await delete_prefix(client, config.prefix)
        await client.aclose()


async def test_a_namespace_is_counted_and_cleared_alone(redis_config: RedisConfig) -> None:
    await check_only_its_own(redis_config)


@pytest.mark.slow
async def test_a_namespace_is_cleared_alone_on_a_cluster(
    redis_cluster_url: str, redis_config: RedisConfig
) -> None:
    await check_only_its_own(
        msgspec.structs.replace(redis_config, url=redis_cluster_url, cluster=True)
    )


async def test_glob_characters_of_a_prefix_match_only_themselves(
    redis_config: RedisConfig,
) -> None:
    starred = redis_config.replace(prefix=f"{redis_config.prefix}*")
    plain = redis_config.replace(prefix=f"{redis_config.prefix}-other")
    client = connect(redis_config)
    try:
        await fill(client, some_keys(starred.prefix, 3) + some_keys(plain.prefix, 3))
        assert await clear_prefix(starred) == 4
        assert await existing(client, some_keys(plain.prefix, 3)) == 4
    finally:
        await delete_prefix(client, plain.prefix)
        await client.aclose()


async def test_an_embedded_server_has_no_namespace_to_clear() -> None:
    with pytest.raises(ValueError, match="configured Redis"):
        await count_prefix(RedisConfig().namespaced("run"))
