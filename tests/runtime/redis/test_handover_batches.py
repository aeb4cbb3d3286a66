"""Commands handed over in memory that queue together for one actor are handled as a
batch, as entries read together are: each answered on its own, in order, their
effects stored as one change set and one commit entry, each once; and what the
stream would have carried is never lost when that commit cannot be stored."""

from __future__ import annotations

from typing import Any, ClassVar

import anyio
import msgspec
import pytest
import redis.asyncio as aioredis

from actormem.runtime import Runtime
from actormem.runtime.redis import (
    Keys,
    RedisConfig,
    RedisTransportStats,
    register_message_types,
    shard_of,
)
from tests.runtime.redis.test_batches import BatchLedger, Put
from tests.runtime.redis.test_transport import worker
from tests.runtime.redis.test_unsent import COMMIT_SHA, held
from tests.support.actors import GetState
from tests.support.handover import handing_over, redis_transport, shard_stream, warmed_ledger
from tests.support.redis import hold_lease_elsewhere
from tests.support.streams import eventually, stored_tokens

pytestmark = pytest.mark.anyio


class SlowPut(msgspec.Struct, frozen=True, tag="handbatch.SlowPut"):
    """Like ``Put``, after ``delay`` seconds of work."""

    reply_type: ClassVar[Any] = int
    batch: ClassVar[bool] = True

    token: str
    delay: float


class Spray(msgspec.Struct, frozen=True, tag="handbatch.Spray"):
    """Tell ``Put(token)`` to ``to`` for each of ``tokens``, in order."""

    tokens: list[str]
    to: str


register_message_types(SlowPut, Spray)


class HandLedger(BatchLedger):
    """A batch ledger that also takes slow puts and sprays tells."""

    async def receive(self, message: Any) -> Any:
        match message:
            case SlowPut(token=token, delay=delay):
                await anyio.sleep(delay)
                return await super().receive(Put(token))
            case Spray(tokens=tokens, to=to):
                for token in tokens:
                    await self.ctx.tell(to, Put(token))
                return None
        return await super().receive(message)


def _register(rt: Runtime) -> None:
    rt.register("handbatch", HandLedger)


async def _asked_together(rt: Runtime, address: str, commands: list[Any]) -> list[Any]:
    """Ask ``commands`` of ``address`` at once (each handed over before the actor's
    turn comes); each ask's outcome, in order (its reply or the error raised)."""
    outcomes: list[Any] = [None] * len(commands)

    async def ask(n: int, command: Any) -> None:
        try:
            outcomes[n] = await rt.ref(address).ask(command, timeout=8.0)
        except Exception as exc:
            outcomes[n] = exc

    async with anyio.create_task_group() as tg:
        for n, command in enumerate(commands):
            tg.start_soon(ask, n, command)
    return outcomes


async def _ready(
    rt: Runtime, client: aioredis.Redis, config: RedisConfig, address: str
) -> tuple[list[str], RedisTransportStats, int]:
    """Register the kind and warm ``address`` up until asks to it are handed over; its
    warm-up's tokens, the transport's counters and the length of its shard stream
    then (the change sets counted from there)."""
    _register(rt)
    warm = await warmed_ledger(rt, address)
    before = redis_transport(rt).stats()
    entries = await client.xlen(shard_stream(config, address))
    BatchLedger.change_sets = 0
    return warm, before, entries


async def test_handed_over_asks_queued_together_are_one_batch_answered_each_in_order(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    address = "handbatch/asked"
    stream = shard_stream(redis_config, address)
    async with worker(redis_client, redis_config) as rt:
        warm, before, entries = await _ready(rt, redis_client, redis_config, address)
        transport = redis_transport(rt)
        outcomes = await _asked_together(rt, address, [Put(f"p{i}") for i in range(5)])
        change_sets = BatchLedger.change_sets
        after = transport.stats()
        state = await rt.ref(address).ask(GetState())
    assert outcomes == [len(warm) + 1 + i for i in range(5)]
    assert after.handed_over - before.handed_over == 5
    assert after.failed_back == before.failed_back
    assert await redis_client.xlen(stream) == entries  # none went through the stream
    assert change_sets == 1  # one change set for the five
    expected = [*warm, *(f"p{i}" for i in range(5))]
    assert state.tokens == expected
    stored = await stored_tokens(redis_client, redis_config, [address])
    assert stored[address] == expected  # each stored once, in order


async def test_handed_over_tells_queued_together_are_one_batch_stored_once_in_order(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    relay, sink = "handbatch/relay", "handbatch/sink"
    keys = Keys(redis_config.prefix)
    async with worker(redis_client, redis_config) as rt:
        _register(rt)
        await handing_over(rt, relay)
        warm = await warmed_ledger(rt, sink)
        transport = redis_transport(rt)
        before = transport.stats()
        BatchLedger.change_sets = 0
        tokens = [f"s{i}" for i in range(6)]
        await rt.ref(relay).ask(Spray(tokens, sink))

        async def stored() -> bool:
            found = await stored_tokens(redis_client, redis_config, [sink])
            return len(found[sink]) >= len(warm) + len(tokens)

        await eventually(stored, "the sprayed tells stored")
        change_sets = BatchLedger.change_sets
        after = transport.stats()
        state = await rt.ref(sink).ask(GetState())

        async def forgotten() -> bool:
            unsent = [keys.unsent(shard_of(a, redis_config.shards)) for a in (relay, sink)]
            return not await redis_client.exists(*unsent)

        await eventually(forgotten, "no tell kept unsent")
    assert after.tells_handed_over - before.tells_handed_over == len(tokens)
    assert after.tells_failed_back == before.tells_failed_back
    # The relay's command, then the sink's six tells as one set.
    assert change_sets == 2
    assert state.tokens == [*warm, *tokens]
    found = await stored_tokens(redis_client, redis_config, [sink])
    assert found[sink] == state.tokens  # each once, in order


async def test_a_batch_of_started_asks_with_no_reply_within_half_a_lease_stays_handed_over(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    """Each command of the batch is reported started: its commit held past the asks'
    resend delay, none is taken back through the stream to be handled again."""
    config = msgspec.structs.replace(redis_config, lease_ms=600)  # resent after 0.3 s
    address = "handbatch/held"
    keys = Keys(config.prefix)
    stream = shard_stream(config, address)
    client = held(config, COMMIT_SHA, keys.lease(shard_of(address, config.shards)))
    client.gate.set()
    try:
        async with worker(client, config) as rt:
            warm, before, entries = await _ready(rt, redis_client, config, address)
            transport = redis_transport(rt)
            client.gate = anyio.Event()

            async def release() -> None:
                async def holding() -> bool:
                    return client.held >= 1

                await eventually(holding, "the batch's commit held")
                await anyio.sleep(0.8)  # past the resend delay
                client.gate.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(release)
                outcomes = await _asked_together(rt, address, [Put(f"h{i}") for i in range(4)])
            change_sets = BatchLedger.change_sets
            after = transport.stats()
            state = await rt.ref(address).ask(GetState())
    finally:
        await client.aclose()
    assert outcomes == [len(warm) + 1 + i for i in range(4)]
    assert change_sets == 1
    assert after.asks_resent > before.asks_resent  # no reply within half a lease
    assert after.failed_back == before.failed_back  # yet nothing taken back
    assert await redis_client.xlen(stream) == entries
    assert state.tokens == [*warm, *(f"h{i}" for i in range(4))]
    stored = await stored_tokens(redis_client, config, [address])
    assert stored[address] == state.tokens


async def test_a_batch_of_handed_over_asks_whose_lease_goes_meanwhile_is_applied_once(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    address = "handbatch/fenced"
    shard = shard_of(address, redis_config.shards)
    tokens = [f"f{i}" for i in range(3)]
    async with worker(redis_client, redis_config) as rt:
        _register(rt)
        warm = await warmed_ledger(rt, address)
        transport = redis_transport(rt)
        before = transport.stats()
        BatchLedger.change_sets = 0

        async def fence() -> None:
            await anyio.sleep(0.2)  # handed over, and the batch being handled
            # Someone else holds the shard for a moment: its commit cannot be stored.
            await hold_lease_elsewhere(redis_client, redis_config, shard)

        async with anyio.create_task_group() as tg:
            tg.start_soon(fence)
            outcomes = await _asked_together(rt, address, [SlowPut(t, 0.2) for t in tokens])
        change_sets = BatchLedger.change_sets
        after = transport.stats()
        state = await rt.ref(address).ask(GetState(), timeout=8.0)
    assert change_sets >= 1
    assert after.handed_over - before.handed_over == 3
    assert after.failed_back - before.failed_back >= 3  # through the stream after all
    assert [o for o in outcomes if isinstance(o, Exception)] == []
    assert state.tokens == [*warm, *tokens]  # each applied once, in order
    stored = await stored_tokens(redis_client, redis_config, [address])
    assert stored[address] == state.tokens
