"""Scripts run many times in one pipeline (:func:`eval_pipelined`), on one server and a
cluster, through a client and through its wire."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator

import msgspec
import pytest
import redis.asyncio as aioredis
import redis.exceptions as rexc

from actormem.runtime.redis import Keys, RedisConfig
from actormem.runtime.redis._client import eval_pipelined
from actormem.runtime.redis._wire import Wire, wire
from tests.support.redis import prefixed_client

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["server", "cluster"])
def config(request: pytest.FixtureRequest, redis_config: RedisConfig) -> RedisConfig:
    if request.param == "server":
        return redis_config
    url = request.getfixturevalue("redis_cluster_url")
    return msgspec.structs.replace(redis_config, url=url, cluster=True)


@pytest.fixture
async def client(config: RedisConfig) -> AsyncIterator[aioredis.Redis]:
    async with prefixed_client(config) as client:
        yield client


@pytest.fixture(params=["client", "wire"])
def through(request: pytest.FixtureRequest, client: aioredis.Redis) -> aioredis.Redis | Wire:
    """What the calls go through: the client (redis-py's pipeline) or its wire."""
    return client if request.param == "client" else wire(client)


async def test_a_script_the_server_has_not_seen_is_loaded_and_every_call_runs_once(
    client: aioredis.Redis, through: aioredis.Redis | Wire, redis_config: RedisConfig
) -> None:
    # A script text no server has cached: every first call gets NOSCRIPT.
    script = f"-- {secrets.token_hex(8)}\nreturn redis.call('RPUSH', KEYS[1], ARGV[1])"
    keys = Keys(redis_config.prefix)
    lists = [keys.actor_log(shard, "memory/a") for shard in range(6)]
    calls = [([key], [f"item{i}"]) for i, key in enumerate(lists)]
    assert await eval_pipelined(through, script, calls) == [1] * 6
    assert await eval_pipelined(through, script, calls) == [2] * 6
    for i, key in enumerate(lists):
        assert await client.lrange(key, 0, -1) == [f"item{i}".encode()] * 2


async def test_a_failing_call_raises_its_error(
    client: aioredis.Redis, through: aioredis.Redis | Wire, redis_config: RedisConfig
) -> None:
    key = Keys(redis_config.prefix).actor_log(0, "memory/a")
    with pytest.raises(rexc.ResponseError, match="boom"):
        await eval_pipelined(through, "return redis.error_reply('boom')", [([key], [])])


async def test_a_single_call_goes_without_a_pipeline_and_runs_once(
    client: aioredis.Redis, through: aioredis.Redis | Wire, redis_config: RedisConfig
) -> None:
    script = f"-- {secrets.token_hex(8)}\nreturn redis.call('RPUSH', KEYS[1], ARGV[1])"
    key = Keys(redis_config.prefix).actor_log(3, "memory/a")
    assert await eval_pipelined(through, script, [([key], ["x"])]) == [1]  # after NOSCRIPT
    assert await eval_pipelined(through, script, [([key], ["y"])]) == [2]
    assert await client.lrange(key, 0, -1) == [b"x", b"y"]
