"""Actors a worker reads commands for and does not hold are loaded together: their
applied ids and stored state come in one round trip per read, not two per actor."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis

from actormem.runtime.redis import RedisConfig, connect, shard_of
from tests.runtime.redis.test_transport import worker
from tests.support.actors import Add, GetState, LedgerState

pytestmark = pytest.mark.anyio


class CountingRedis(aioredis.Redis):
    """A client that counts the commands sent on their own (not in a pipeline)."""

    alone: list[str] = []

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        type(self).alone.append(str(args[0]).upper())
        return await super().execute_command(*args, **options)


async def test_actors_read_together_are_loaded_in_one_round_trip_with_their_state(
    redis_config: RedisConfig, redis_client: aioredis.Redis
) -> None:
    # Ten ledgers of one shard, so that one read holds a command for each.
    named = (f"ledger/bulk{i}" for i in range(1_000))
    addresses = [a for a in named if shard_of(a, redis_config.shards) == 0][:10]
    async with worker(redis_client, redis_config) as rt:
        for address in addresses:
            await rt.ref(address).ask(Add(f"{address}-1", 1))
    # One more command each, queued while no worker runs.
    async with worker(redis_client, redis_config, worker=False) as client:
        for address in addresses:
            await client.ref(address).tell(Add(f"{address}-2", 2))
    counting = CountingRedis.from_pool(connect(redis_config).connection_pool)
    CountingRedis.alone = []
    try:
        async with worker(counting, redis_config) as rt:
            for address in addresses:
                state = await rt.ref(address).ask(GetState())
                assert isinstance(state, LedgerState)
                assert state.tokens == [f"{address}-1", f"{address}-2"]
                assert state.total == 3
    finally:
        await counting.aclose()
    # Neither the applied ids nor the state was loaded one actor at a time.
    assert "ZRANGE" not in CountingRedis.alone
    assert "LRANGE" not in CountingRedis.alone
