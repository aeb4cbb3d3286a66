"""Tells a handler sends to actors of the shards its worker owns are handed over in
memory, with the stream's guarantees: each stored once and in order, kept with the
sender's commit until the recipient's commit stored it, and sent through the
stream after all, with the same id, when that commit fails."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.lowlevel
import pytest
import redis.asyncio as aioredis

from actormem.runtime import Actor, Runtime
from actormem.runtime.redis import RedisConfig
from actormem.runtime.redis._handover import HandedTell
from actormem.runtime.redis._outbox import Outbox
from tests.runtime.redis.test_transport import worker
from tests.runtime.redis.test_unsent import COMMIT_SHA, Layout, held, layout
from tests.support.actors import Add, GetState, Pass
from tests.support.handover import handing_over, redis_transport, shard_stream, warmed_ledger
from tests.support.redis import hold_lease_elsewhere
from tests.support.streams import eventually, stored_tokens

pytestmark = pytest.mark.anyio


async def _tells_handed_over(rt: Runtime) -> int:
    return redis_transport(rt).stats().tells_handed_over


async def _last_entry(client: aioredis.Redis, stream: str) -> str:
    """The id of the last entry of ``stream`` (``0-0`` if it has none)."""
    last = await client.xrevrange(stream, count=1)
    return last[0][0].decode() if last else "0-0"


@asynccontextmanager
async def _relaying(
    client: aioredis.Redis, config: RedisConfig
) -> AsyncIterator[tuple[Runtime, Layout, list[str]]]:
    """A worker on ``client`` that hands over to a relay and a sink ledger on two of
    its shards (both warmed up), the ledgers, and the tokens of the sink's warm-up."""
    ledgers = layout(config)
    async with worker(client, config) as rt:
        await handing_over(rt, ledgers.relay)
        warm = await warmed_ledger(rt, ledgers.sink)
        yield rt, ledgers, warm


async def test_tells_to_an_owned_shard_are_handed_over_and_stored_once_in_order(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    async with _relaying(redis_client, redis_config) as (rt, ledgers, warm):
        relay, sink, relay_shard, _, keys = ledgers
        sink_stream = shard_stream(redis_config, sink)
        entries = await redis_client.xlen(sink_stream)
        before = await _tells_handed_over(rt)
        for i in range(10):
            await rt.ref(relay).ask(Pass(f"p{i}", sink))
        assert await _tells_handed_over(rt) - before == 10
        state = await rt.ref(sink).ask(GetState())

        async def forgotten() -> bool:
            return not await redis_client.exists(keys.unsent(relay_shard))

        await eventually(forgotten, "the kept tells deleted once stored")
        assert await redis_client.xlen(sink_stream) == entries  # none went through it
        assert redis_transport(rt).stats().tells_failed_back == 0
    told = [f"p{i}" for i in range(10)]
    assert state.tokens == [*warm, *told]
    stored = await stored_tokens(redis_client, redis_config, [sink])
    assert stored[sink] == state.tokens  # each stored once, in order


async def test_a_handed_over_tell_is_kept_with_its_senders_commit_until_stored(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    relay, sink, relay_shard, sink_shard, keys = layout(redis_config)
    unsent = keys.unsent(relay_shard)
    # The sink's commits wait for the gate; the relay's go.
    client = held(redis_config, COMMIT_SHA, keys.lease(sink_shard))
    client.gate.set()
    try:
        async with _relaying(client, redis_config) as (rt, _, warm):
            client.gate = anyio.Event()
            before = await _tells_handed_over(rt)
            await rt.ref(relay).ask(Pass("kept", sink))  # the relay's commit is stored
            assert await _tells_handed_over(rt) - before == 1

            async def holding() -> bool:
                return client.held >= 1

            await eventually(holding, "the sink's commit held")
            # Its recipient's commit has not stored it: its sender's commit kept it.
            assert await redis_client.hlen(unsent) == 1  # type: ignore[misc]
            client.gate.set()

            async def forgotten() -> bool:
                return not await redis_client.exists(unsent)

            await eventually(forgotten, "the kept tell deleted once stored")
            state = await rt.ref(sink).ask(GetState())
    finally:
        await client.aclose()
    assert state.tokens == [*warm, "kept"]
    stored = await stored_tokens(redis_client, redis_config, [sink])
    assert stored[sink] == state.tokens


async def test_handed_over_tells_whose_commit_is_fenced_off_go_through_the_stream_once_in_order(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    relay, sink, _, sink_shard, keys = layout(redis_config)
    stream = shard_stream(redis_config, sink)
    client = held(redis_config, COMMIT_SHA, keys.lease(sink_shard))
    client.gate.set()
    try:
        async with _relaying(client, redis_config) as (rt, _, warm):
            last = await _last_entry(redis_client, stream)
            client.gate = anyio.Event()
            await rt.ref(relay).ask(Pass("fenced1", sink))

            async def holding() -> bool:
                return client.held >= 1

            await eventually(holding, "the sink's commit held")
            await rt.ref(relay).ask(Pass("fenced2", sink))  # behind the held commit
            # Someone else holds the sink's shard for a moment: its commits are fenced off.
            await hold_lease_elsewhere(redis_client, redis_config, sink_shard)
            client.gate.set()

            async def applied() -> bool:
                stored = await stored_tokens(redis_client, redis_config, [sink])
                return "fenced2" in stored[sink]

            await eventually(applied, "the tells stored after all", limit=15.0)
            assert redis_transport(rt).stats().tells_failed_back >= 2
            state = await rt.ref(sink).ask(GetState(), timeout=8.0)
            entries = await redis_client.xrange(stream, min=f"({last}")
    finally:
        await client.aclose()
    # Through the stream with their own ids, in the order they were handed over.
    sent = [b"fenced1" in e[b"e"] for _, e in entries if b"fenced" in e[b"e"]]
    assert sent == [True, False]
    assert state.tokens == [*warm, "fenced1", "fenced2"]
    stored = await stored_tokens(redis_client, redis_config, [sink])
    assert stored[sink] == state.tokens  # each once, in order


async def test_what_is_sent_through_the_stream_goes_behind_copies_of_tells_handed_over(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    # Should the shard go before the handed-over ask and tell are handled, its next
    # owner must meet them before what was sent after them: copies go first.
    async with _relaying(redis_client, redis_config) as (rt, ledgers, warm):
        relay, sink = ledgers.relay, ledgers.sink
        stream = shard_stream(redis_config, sink)
        last = await _last_entry(redis_client, stream)
        before = await _tells_handed_over(rt)
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: rt.ref(sink).ask(Add("asked-first", delay=0.3)))
            await anyio.sleep(0.1)  # handed over, and being handled
            await rt.ref(relay).ask(Pass("passed", sink))  # handed over, queued behind it
            await rt.ref(sink).tell(Add("told-after"))  # from outside: through the stream
        assert await _tells_handed_over(rt) - before == 1

        async def all_three() -> bool:
            return (await rt.ref(sink).ask(GetState())).tokens[-1:] == ["told-after"]

        await eventually(all_three, "the tell is applied")
        state = await rt.ref(sink).ask(GetState())
        entries = await redis_client.xrange(stream, min=f"({last}")
    bodies = [fields[b"e"] for _, fields in entries]
    assert [b"asked-first" in b for b in bodies] == [True, False, False]
    assert b"passed" in bodies[1]
    assert b"told-after" in bodies[2]
    assert state.tokens == [*warm, "asked-first", "passed", "told-after"]  # copies skipped
    stored = await stored_tokens(redis_client, redis_config, [sink])
    assert stored[sink] == state.tokens


class Piper(Actor):
    """Pipes a moment of work whose outcome, ``Add(token)``, is told to ``ledger/piped``."""

    async def receive(self, message: object) -> None:
        async def work() -> str:
            await anyio.sleep(0.01)
            return str(message)

        self.ctx.pipe(work, "ledger/piped", lambda token, _: Add(token))


async def test_a_piped_outcome_is_handed_over_and_stored_once(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    address = "ledger/piped"
    stream = shard_stream(redis_config, address)
    async with worker(redis_client, redis_config) as rt:
        rt.register("piper", Piper)
        warm = await warmed_ledger(rt, address)
        last = await _last_entry(redis_client, stream)
        before = await _tells_handed_over(rt)
        for i in range(3):
            await rt.ref("piper/a").ask(f"piped{i}")

        async def applied() -> bool:
            return len((await rt.ref(address).ask(GetState())).tokens) == len(warm) + 3

        await eventually(applied, "the piped outcomes applied")
        assert await _tells_handed_over(rt) - before == 3
        entries = await redis_client.xrange(stream, min=f"({last}")
        # None went through it (the piper may share the shard: its asks may).
        assert not [e for _, e in entries if address.encode() in e[b"e"]]
        state = await rt.ref(address).ask(GetState())
    assert sorted(state.tokens[len(warm) :]) == ["piped0", "piped1", "piped2"]
    stored = await stored_tokens(redis_client, redis_config, [address])
    assert stored[address] == state.tokens


async def test_tells_from_code_outside_any_actor_still_go_through_the_stream(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    address = "ledger/outside"
    stream = shard_stream(redis_config, address)
    async with worker(redis_client, redis_config) as rt:
        await handing_over(rt, address)
        entries = await redis_client.xlen(stream)
        before = await _tells_handed_over(rt)
        await rt.ref(address).tell(Add("outside"))
        await rt.transport.flush()  # in Redis once flushed
        assert await redis_client.xlen(stream) == entries + 1
        assert await _tells_handed_over(rt) == before


async def test_a_handed_over_tell_is_done_once_stored_or_written() -> None:
    outbox = Outbox(lambda: None, size=10, stream_limit=10)  # type: ignore[arg-type, return-value]
    tell = HandedTell(envelope=None, item=("s", b"", 0.0), shard=0)  # type: ignore[arg-type]
    assert not tell.done(outbox.finished)
    tell.settle(position=3)  # sent through the stream, third in the outbox
    assert not tell.done(2)
    assert tell.done(3)
    stored = HandedTell(envelope=None, item=("s", b"", 0.0), shard=0)  # type: ignore[arg-type]
    with anyio.fail_after(1):
        async with anyio.create_task_group() as tg:
            tg.start_soon(stored.wait, outbox)
            await anyio.lowlevel.checkpoint()
            stored.settle(stored=True)
    assert stored.done(0)
