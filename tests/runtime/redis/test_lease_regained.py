"""A worker that loses a shard's lease mid-work and later takes the shard again
starts its actors afresh from what is stored, never from the state it held when the
lease went (that state may hold changes that were never stored); what the lost
holding's tasks still do before they stop changes nothing of the new holding."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from actormem.runtime.redis import Keys, RedisConfig, RedisTransport, shard_of
from actormem.runtime.redis._shards import ActorRecord, Holdings, Shard, StreamEnvelope
from tests.runtime.redis.test_transport import worker
from tests.support.actors import Add, GetState
from tests.support.redis import hold_lease_elsewhere
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
        await hold_lease_elsewhere(redis_client, redis_config, shard)

        async def all_stored() -> bool:
            stored = await stored_tokens(redis_client, redis_config, [address])
            return len(stored[address]) >= len(tokens)

        await eventually(all_stored, "every command is stored", limit=30.0)
        state = await rt.ref(address).ask(GetState())
    stored = await stored_tokens(redis_client, redis_config, [address])
    assert stored[address] == tokens
    assert state.tokens == tokens


# -- a lost holding's tasks, running on for a moment after their cancellation ------------


def _envelope(lease: str, entry: str = "1-0", command: str = "c1") -> StreamEnvelope:
    return StreamEnvelope(
        recipient="ledger/a", body=Add("x"), id=command, shard=0, entry=entry, lease=lease
    )


async def test_letting_go_of_a_lost_holding_s_delivery_leaves_the_current_holding_alone() -> None:
    # The shard was lost under lease 1 and taken again under lease 2; the new holding
    # claimed the same entry, and its command is in flight again. The old delivery
    # finishing must not make that entry and command look settled: a copy read next
    # would be delivered twice, or acked as a duplicate while its command is unstored.
    held = Holdings()
    shard = held.shards[0] = Shard(0, "2:w")
    shard.inflight.add("1-0")
    record = held.actors["ledger/a"] = ActorRecord(0, [])
    record.inflight.add("c1")
    record.busy = 1
    held.dropped(_envelope("1:w"))
    assert shard.inflight == {"1-0"}
    assert record.inflight == {"c1"}
    assert record.busy == 1
    held.dropped(_envelope("2:w"))  # the current holding's own delivery settles
    assert not shard.inflight
    assert not record.inflight
    assert record.busy == 0


async def test_a_lost_holding_delivers_nothing_and_makes_no_record(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    # What a lost holding's read or claim brings after the loss (its task not yet
    # stopped) stays pending for the current holding, which claims it itself.
    address = "ledger/stale-holding"
    number = shard_of(address, redis_config.shards)
    async with worker(redis_client, redis_config) as rt:
        await rt.ref(address).ask(Add("first"))
        transport = rt.transport
        assert isinstance(transport, RedisTransport)
        held, intake = transport._held, transport._intake
        old = held.shards[number]
        held.shards[number] = Shard(number, "999:someone")  # taken again meanwhile
        del held.actors[address]
        env = StreamEnvelope(recipient=address, body=Add("late"), id="late-1", lease=old.lease)
        env.shard, env.entry = number, "1-1"
        try:
            await intake._accept(old, "1-1", b"data", env)
            assert address not in held.actors
            assert "1-1" not in old.inflight
        finally:
            held.shards[number] = old
        state = await rt.ref(address).ask(GetState())
    assert state.tokens == ["first"]
