"""An ask to a shard no worker owns fails fast, naming the shard; a worker that starts
in time still serves it."""

from __future__ import annotations

import time

import anyio
import pytest
import redis.asyncio as aioredis

from actormem.runtime import AskTimeoutError, NoOwnerError, Runtime, RuntimeConfig
from actormem.runtime.redis import Keys, RedisConfig, shard_of
from actormem.runtime.redis.transport import RedisTransport
from tests.runtime.redis.test_transport import worker
from tests.support.actors import Add, GetState

pytestmark = pytest.mark.anyio


def client(config: RedisConfig, ask_timeout: float = 30.0) -> Runtime:
    transport = RedisTransport(config.url, config, worker=False)
    return Runtime(RuntimeConfig(ask_timeout=ask_timeout), transport=transport)


async def test_an_ask_with_no_worker_fails_within_the_no_owner_timeout(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    address = "ledger/lonely"
    shard = shard_of(address, redis_config.shards)
    async with client(redis_config) as rt:
        started = time.monotonic()
        with pytest.raises(NoOwnerError) as caught:
            await rt.ask(address, GetState())
        took = time.monotonic() - started
    text = str(caught.value)
    assert f"no worker owns shard {shard}" in text
    assert "no worker of this deployment is live" in text
    assert "GetState" in text and address in text
    assert isinstance(caught.value, AskTimeoutError)  # callers that handle timeouts handle it
    # The bound, with a wide margin (the ask timeout is 30 s): ~2 s measured.
    assert took < 10


async def test_a_worker_that_starts_within_the_window_serves_the_ask(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    async with client(redis_config) as rt:
        results: list[int] = []

        async def ask() -> None:
            results.append(await rt.ask("ledger/late", Add("t", 5)))

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            await anyio.sleep(0.2)  # the ask is in the stream; now a worker starts
            async with worker(redis_client, redis_config):
                with anyio.fail_after(20):
                    while not results:  # noqa: ASYNC110 (the ask task fills it)
                        await anyio.sleep(0.05)
        assert results == [5]


async def test_live_workers_that_leave_a_shard_unowned_get_a_lease_more(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    # A worker registered as live that takes no shard (it hangs, say).
    keys = Keys(redis_config.prefix)
    await redis_client.zadd(keys.workers(), {"stuck": int(time.time() * 1000) + 60_000})
    async with client(redis_config) as rt:
        with pytest.raises(NoOwnerError, match="none of the 1 live workers took it") as caught:
            await rt.ask("ledger/x", GetState())
    # no_owner_timeout plus a lease (lease_ms = 1 s in the tests).
    assert "failed after 3s" in str(caught.value)


async def test_the_check_can_be_turned_off(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    config = redis_config.replace(no_owner_timeout=0)
    async with client(config, ask_timeout=1.0) as rt:
        with pytest.raises(AskTimeoutError) as caught:
            await rt.ask("ledger/y", GetState())
    assert not isinstance(caught.value, NoOwnerError)


def test_the_timeout_must_not_be_negative(redis_config: RedisConfig) -> None:
    with pytest.raises(ValueError, match="no_owner_timeout must be >= 0"):
        redis_config.replace(no_owner_timeout=-1)
