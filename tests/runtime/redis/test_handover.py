"""Asks a worker makes to actors of the shards it owns are handed over in memory,
with the stream's guarantees: order per sender, exactly-once effects, replies and
errors, and nothing lost when the shard's lease goes meanwhile."""

from __future__ import annotations

import anyio
import msgspec
import pytest
import redis.asyncio as aioredis

from actormem.runtime.errors import AskTimeoutError, HandlerError
from actormem.runtime.redis import Keys, RedisConfig, shard_of
from actormem.runtime.redis._handover import HandedEnvelope, unsent_order
from actormem.runtime.redis._shards import StreamEnvelope
from tests.runtime.redis.test_transport import worker
from tests.support.actors import Add, Boom, GetState, Pass, Refuse, RefusedError
from tests.support.handover import handing_over, redis_transport, shard_stream, warmed_ledger
from tests.support.redis import hold_lease_elsewhere
from tests.support.streams import eventually, stored_tokens

pytestmark = pytest.mark.anyio


async def test_asks_to_an_owned_shard_are_handed_over_and_stored_once(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    address = "ledger/handed"
    stream = shard_stream(redis_config, address)
    async with worker(redis_client, redis_config) as rt:
        warm = await warmed_ledger(rt, address)
        entries = await redis_client.xlen(stream)
        before = redis_transport(rt).stats().handed_over
        totals = [await rt.ref(address).ask(Add(f"t{i}", 2)) for i in range(20)]
        stats = redis_transport(rt).stats()
        assert stats.handed_over - before == 20
        assert await redis_client.xlen(stream) == entries  # none went through the stream
        state = await rt.ref(address).ask(GetState())
    expected = [*warm, *(f"t{i}" for i in range(20))]
    assert totals == [state.total - 2 * (19 - i) for i in range(20)]
    assert state.tokens == expected
    stored = await stored_tokens(redis_client, redis_config, [address])
    assert stored[address] == expected  # each stored once, in order


async def test_an_ask_waits_behind_what_went_through_the_stream_before_it(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    address = "ledger/ordered"
    async with worker(redis_client, redis_config) as rt:
        warm = await warmed_ledger(rt, address)
        told = [f"told{i}" for i in range(30)]
        for token in told:  # tells always go through the stream
            await rt.ref(address).tell(Add(token, delay=0.002))
        await rt.ref(address).ask(Add("asked"))
        state = await rt.ref(address).ask(GetState())
    assert state.tokens == [*warm, *told, "asked"]
    stored = await stored_tokens(redis_client, redis_config, [address])
    assert stored[address] == state.tokens


async def test_handed_over_asks_get_their_errors_and_timeouts(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    address = "ledger/errors"
    async with worker(redis_client, redis_config) as rt:
        transport = await handing_over(rt, address)
        before = transport.stats()
        with pytest.raises(RefusedError, match="refused on purpose"):
            await rt.ref(address).ask(Refuse())
        with pytest.raises(HandlerError, match="RuntimeError: boom"):
            await rt.ref(address).ask(Boom())  # retried, then dead-lettered
        with pytest.raises(AskTimeoutError):
            await rt.ref(address).ask(Add("slow", delay=0.3), timeout=0.1)
        after = transport.stats()
        assert after.handed_over - before.handed_over == 3
        assert after.dead_lettered == before.dead_lettered + 1
        await rt.ref(address).ask(Add("after"))
        state = await rt.ref(address).ask(GetState())
    assert state.tokens[-2:] == ["slow", "after"]
    stored = await stored_tokens(redis_client, redis_config, [address])
    assert stored[address] == state.tokens


async def test_a_started_ask_with_no_reply_within_half_a_lease_stays_handed_over(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    """Its handling answers it, success or failure: no copy goes through the stream
    to be handled again (say after its command was given up)."""
    config = msgspec.structs.replace(redis_config, lease_ms=600)  # resent after 0.3 s
    keys = Keys(config.prefix)
    slow, failing = "ledger/slow-handed", "ledger/failing-handed"
    async with worker(redis_client, config) as rt:
        for address in (slow, failing):
            transport = await handing_over(rt, address)
        before = transport.stats()
        entries = [await redis_client.xlen(shard_stream(config, a)) for a in (slow, failing)]
        assert await rt.ref(slow).ask(Add("slow", delay=0.8)) >= 1
        with pytest.raises(HandlerError, match="RuntimeError: boom"):
            await rt.ref(failing).ask(Boom(delay=0.4))  # retried, then given up
        after = transport.stats()
        assert after.asks_resent > before.asks_resent  # no reply within half a lease
        assert after.failed_back == before.failed_back  # yet nothing taken back
        assert after.dead_lettered == before.dead_lettered + 1
        assert [
            await redis_client.xlen(shard_stream(config, a)) for a in (slow, failing)
        ] == entries
        state = await rt.ref(slow).ask(GetState())
    assert state.tokens.count("slow") == 1
    letters = await redis_client.xrange(keys.dead_letters())
    assert len(letters) == 1


async def test_a_given_up_ask_is_not_sent_again_while_its_dead_letter_is_written(
    redis_client: aioredis.Redis, redis_config: RedisConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between giving a handed-over ask's command up and telling its asker so (after
    the dead letter is written) the ask is still held: a resend that falls in between
    sends no copy through the stream."""
    config = msgspec.structs.replace(redis_config, lease_ms=600)  # resent after 0.3 s
    address = "ledger/given-up-handed"
    async with worker(redis_client, config) as rt:
        transport = await handing_over(rt, address)
        dead_letters = transport._intake._dead_letters
        write_handled = dead_letters.write_handled
        written = anyio.Event()

        async def slow_write_handled(*args: object) -> None:
            await written.wait()  # held until a resend came meanwhile
            await write_handled(*args)  # type: ignore[arg-type]

        monkeypatch.setattr(dead_letters, "write_handled", slow_write_handled)
        before = transport.stats()
        entries = await redis_client.xlen(shard_stream(config, address))

        async def resent() -> bool:
            return transport.stats().asks_resent > before.asks_resent

        async def asked() -> None:
            with pytest.raises(HandlerError, match="RuntimeError: boom"):
                await rt.ref(address).ask(Boom())

        async with anyio.create_task_group() as tg:
            tg.start_soon(asked)
            await eventually(resent, "the ask is resent while its dead letter waits")
            written.set()
        after = transport.stats()
        assert after.dead_lettered == before.dead_lettered + 1
        assert await redis_client.xlen(shard_stream(config, address)) == entries


async def test_an_ask_queued_behind_a_slow_one_past_half_a_lease_stays_handed_over(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    """An ask that waits in its actor's mailbox past its resend delay (it cannot start
    before the slow command ahead of it ends) is answered by its handling alone: no
    copy of it goes through the stream, and a failing one is given up once."""
    config = msgspec.structs.replace(redis_config, lease_ms=600)  # resent after 0.3 s
    address = "ledger/queued-handed"
    async with worker(redis_client, config) as rt:
        transport = await handing_over(rt, address)
        before = transport.stats()
        entries = await redis_client.xlen(shard_stream(config, address))
        failed: list[BaseException] = []

        async def failing() -> None:
            with pytest.raises(HandlerError, match="RuntimeError: boom") as raised:
                await rt.ref(address).ask(Boom())
            failed.append(raised.value)

        async def slow_handed_over() -> bool:
            return transport.stats().handed_over > before.handed_over

        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: rt.ref(address).ask(Add("slow", delay=1.0)))
            await eventually(slow_handed_over, "the slow ask is handed over")
            tg.start_soon(failing)  # queued behind it for a second: past half a lease
        after = transport.stats()
        assert len(failed) == 1
        assert after.handed_over == before.handed_over + 2
        assert after.asks_resent > before.asks_resent  # no reply within half a lease
        assert after.failed_back == before.failed_back
        assert after.dead_lettered == before.dead_lettered + 1
        assert await redis_client.xlen(shard_stream(config, address)) == entries
        state = await rt.ref(address).ask(GetState())
    assert state.tokens.count("slow") == 1
    assert len(await redis_client.xrange(Keys(config.prefix).dead_letters())) == 1


async def test_a_handed_over_ask_whose_lease_goes_meanwhile_is_applied_once(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    address = "ledger/fenced"
    shard = shard_of(address, redis_config.shards)
    async with worker(redis_client, redis_config) as rt:
        transport = await handing_over(rt, address)
        before = transport.stats().handed_over
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: rt.ref(address).ask(Add("fenced", delay=0.6), timeout=8.0))
            await anyio.sleep(0.2)  # handed over, and being handled
            # Someone else holds the shard for a moment: the commit is fenced off.
            await hold_lease_elsewhere(redis_client, redis_config, shard)
        stats = transport.stats()
        assert stats.handed_over > before
        assert stats.failed_back >= 1  # it went through the stream after all
        state = await rt.ref(address).ask(GetState(), timeout=8.0)
    assert state.tokens.count("fenced") == 1
    stored = await stored_tokens(redis_client, redis_config, [address])
    assert stored[address].count("fenced") == 1
    assert stored[address] == state.tokens


async def test_the_tells_of_a_handed_over_command_go_out_once(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    source, target = "ledger/source", "ledger/target"
    async with worker(redis_client, redis_config) as rt:
        await handing_over(rt, source)
        before = redis_transport(rt).stats().handed_over
        for i in range(5):
            await rt.ref(source).ask(Pass(f"p{i}", to=target))
        assert redis_transport(rt).stats().handed_over - before == 5

        async def told() -> bool:
            stored = await stored_tokens(redis_client, redis_config, [target])
            return len(stored[target]) >= 5

        await eventually(told, "every tell is applied")
    stored = await stored_tokens(redis_client, redis_config, [target])
    assert stored[target] == [f"p{i}" for i in range(5)]


def test_a_handed_over_commands_tells_are_sent_again_in_the_order_it_was_handled() -> None:
    # Read before it: entry 5-3; handed over after it, twice; then entry 5-4 read.
    read_before = StreamEnvelope(recipient="a/x", body=None, entry="5-3")
    first = HandedEnvelope(recipient="a/x", body=None, after="5-3", rank=1)
    second = HandedEnvelope(recipient="a/x", body=None, after="5-3", rank=2)
    read_after = StreamEnvelope(recipient="a/x", body=None, entry="5-4")

    def key(command: StreamEnvelope, n: int) -> tuple[int, int, int]:
        entry, start = unsent_order(command)
        ms, _, seq = entry.partition("-")
        return int(ms), int(seq), start + n

    handled = [
        (read_before, 0),
        (read_before, 7),
        (first, 0),
        (first, 3),
        (second, 0),
        (read_after, 0),
    ]
    keys = [key(command, n) for command, n in handled]
    assert keys == sorted(keys)


async def test_what_is_sent_through_the_stream_goes_behind_copies_of_asks_handed_over(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    # Should the shard go before the handed-over ask is handled, its next owner must
    # meet the ask before the tell sent after it: a copy of it goes to the stream first.
    address = "ledger/ahead"
    stream = shard_stream(redis_config, address)
    async with worker(redis_client, redis_config) as rt:
        warm = await warmed_ledger(rt, address)
        last = (await redis_client.xrevrange(stream, count=1) or [(b"0-0", {})])[0][0]
        before = redis_transport(rt).stats().handed_over
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: rt.ref(address).ask(Add("asked-first", delay=0.3)))
            await anyio.sleep(0.1)  # handed over, and being handled
            await rt.ref(address).tell(Add("told-after"))
        assert redis_transport(rt).stats().handed_over - before == 1

        async def both() -> bool:
            return (await rt.ref(address).ask(GetState())).tokens[-1:] == ["told-after"]

        await eventually(both, "the tell is applied")
        state = await rt.ref(address).ask(GetState())
        entries = await redis_client.xrange(stream, min=f"({last.decode()}")
    bodies = [fields[b"e"] for _, fields in entries]
    assert [b"asked-first" in b for b in bodies] == [True, False]
    assert b"told-after" in bodies[1]
    assert state.tokens == [*warm, "asked-first", "told-after"]  # the copy was skipped
    stored = await stored_tokens(redis_client, redis_config, [address])
    assert stored[address] == state.tokens
