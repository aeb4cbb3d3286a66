"""A worker that loses a shard's lease mid-work and later takes the shard again
starts its actors afresh from what is stored, never from the state it held when the
lease went (that state may hold changes that were never stored)."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from actormem.runtime.redis import Keys, RedisConfig, shard_of
from tests.runtime.redis.test_transport import worker
from tests.support.actors import Add, GetState
from tests.support.streams import eventually, stored_tokens

pytestmark = pytest.mark.anyio


async def test_a_shard_taken_again_after_its_lease_was_lost_is_served_from_storage(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    keys = Keys(redis_config.prefix)
    address = "ledger/regained"
    shard = shard_of(address, redis_config.shards)
    tokens = [f"t{i}" for i in range(300)]
    async with worker(redis_client, redis_config) as rt:
        for token in tokens:  # slow commands: the lease goes while some are queued
            await rt.ref(address).tell(Add(token, delay=0.005))

        async def some_applied() -> bool:
            return len(await redis_client.lrange(keys.actor_log(shard, address), 0, -1)) >= 5

        await eventually(some_applied, "the first commands are stored")
        # Someone else holds the shard for a moment; then it is free again.
        await redis_client.set(keys.lease(shard), "999:someone-else", px=1_500)

        async def all_stored() -> bool:
            stored = await stored_tokens(redis_client, redis_config, [address])
            return len(stored[address]) >= len(tokens)

        await eventually(all_stored, "every command is stored", limit=30.0)
        state = await rt.ref(address).ask(GetState())
    stored = await stored_tokens(redis_client, redis_config, [address])
    assert stored[address] == tokens
    assert state.tokens == tokens
