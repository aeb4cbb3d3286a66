"""The Redis transport in one process: asks, tells, durability, exactly-once."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import msgspec
import pytest
import redis.asyncio as aioredis

from actormem.runtime import (
    AskTimeoutError,
    HandlerError,
    MessageTooLargeError,
    Runtime,
    RuntimeConfig,
    SupervisionConfig,
    new_id,
)
from actormem.runtime._envelope import Envelope
from actormem.runtime.errors import MessageDecodeError, TransportUnavailableError
from actormem.runtime.redis import (
    CONSUMER_GROUP,
    Codec,
    Keys,
    RedisConfig,
    default_codec,
    free_port,
    shard_of,
)
from actormem.runtime.redis.transport import RedisTransport
from tests.support.actors import (
    Add,
    Boom,
    Brittle,
    Flaky,
    GetState,
    Ledger,
    LedgerState,
    Refuse,
    RefusedError,
    Relay,
    Relayer,
    Reset,
    register,
)
from tests.support.redis import hold_lease_elsewhere
from tests.support.streams import eventually

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def worker(
    client: aioredis.Redis | str, config: RedisConfig, **kwargs: Any
) -> AsyncIterator[Runtime]:
    transport = RedisTransport(client, config, **kwargs)
    async with Runtime(RuntimeConfig(ask_timeout=10.0), transport=transport) as rt:
        register(rt)
        yield rt


@asynccontextmanager
async def worker_and_client(
    client: aioredis.Redis, config: RedisConfig
) -> AsyncIterator[tuple[Runtime, Runtime]]:
    """A worker runtime and a client runtime (``worker=False``) on the same Redis."""
    async with worker(client, config) as rt, worker(client, config, worker=False) as asker:
        yield rt, asker


async def test_ask_and_tell_round_trip(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    async with worker(redis_client, redis_config) as rt:
        assert await rt.ref("echo/a").ask("hi") == "hi"
        await rt.ref("ledger/x").tell(Add("t1", 2))
        rt.ref("ledger/x").tell_nowait(Add("t2", 3))
        state = await rt.ref("ledger/x").ask(GetState())
    assert isinstance(state, LedgerState)
    assert (state.tokens, state.total) == (["t1", "t2"], 5)


async def test_errors_cross_as_their_own_class(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    async with worker(redis_client, redis_config) as rt:
        with pytest.raises(RefusedError, match="refused on purpose"):
            await rt.ref("ledger/x").ask(Refuse())
        with pytest.raises(HandlerError, match="RuntimeError: boom"):
            await rt.ref("ledger/y").ask(Boom())


async def test_a_client_asks_a_worker_in_another_runtime(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    async with worker_and_client(redis_client, redis_config) as (_, client):
        assert await client.ref("ledger/a").ask(Add("c1", 7)) == 7
        assert (await client.ref("ledger/a").ask(GetState())).tokens == ["c1"]
        transport = client.transport
        assert isinstance(transport, RedisTransport)
        replies = Keys(redis_config.prefix).replies(transport.id)
        assert await redis_client.exists(replies)
    # A client that leaves deletes its reply stream.
    assert not await redis_client.exists(replies)


async def test_what_a_gone_client_left_unread_expires_within_reply_ttl_ms(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    # A client that died with replies unread (a read's reply quotes an agent's
    # text) leaves its reply stream; it goes reply_ttl_ms after the last reply.
    keys = Keys(redis_config.prefix)
    stream = keys.replies("gone")
    ask = Envelope(
        recipient="ledger/g", body=GetState(), id="ask-1", reply_to=stream, correlation=7
    )
    async with worker(redis_client, redis_config) as rt:
        await rt.ref("ledger/g").ask(Add("kept"))
        await redis_client.xadd(
            keys.stream(shard_of("ledger/g", redis_config.shards)),
            {b"e": default_codec.encode_envelope(ask)},
        )

        async def answered() -> bool:
            return bool(await redis_client.xlen(stream))

        await eventually(answered, "the reply to the gone client is written")
    assert 0 < await redis_client.pttl(stream) <= redis_config.reply_ttl_ms


async def test_a_message_over_the_size_limit_is_refused_before_sending(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    config = msgspec.structs.replace(redis_config, max_message_bytes=200)
    async with worker(redis_client, config) as rt:
        with pytest.raises(MessageTooLargeError, match="max_message_bytes=200"):
            await rt.ref("echo/a").tell("x" * 500)
    keys = Keys(config.prefix)
    assert await redis_client.xlen(keys.stream(shard_of("echo/a", config.shards))) == 0


async def test_state_is_durable_and_the_log_grows_by_appends(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    async with worker(redis_client, redis_config) as rt:
        for i in range(5):
            await rt.ref("ledger/d").tell(Add(f"t{i}"))
        assert (await rt.ref("ledger/d").ask(GetState())).total == 5
    keys = Keys(redis_config.prefix)
    shard = shard_of("ledger/d", redis_config.shards)
    assert await redis_client.lrange(keys.actor_log(shard, "ledger/d"), 0, -1) == [
        f"t{i}".encode() for i in range(5)
    ]
    async with worker(redis_client, redis_config) as rt:
        state = await rt.ref("ledger/d").ask(GetState())
        assert (state.tokens, state.total) == ([f"t{i}" for i in range(5)], 5)
        # A rewrite of the log (clearing it) replaces the stored log.
        await rt.ref("ledger/d").tell(Reset())
        await rt.ref("ledger/d").tell(Add("fresh"))
        assert (await rt.ref("ledger/d").ask(GetState())).tokens == ["fresh"]
    assert await redis_client.lrange(keys.actor_log(shard, "ledger/d"), 0, -1) == [b"fresh"]


async def test_a_second_xadd_of_the_same_command_changes_nothing(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    keys = Keys(redis_config.prefix)
    stream = keys.stream(shard_of("ledger/dup", redis_config.shards))
    data = default_codec.encode_envelope(
        Envelope(recipient="ledger/dup", body=Add("once", 10), id="cmd-0001")
    )
    async with worker(redis_client, redis_config) as rt:
        # A producer whose XADD reply was lost sends the same bytes again.
        await redis_client.xadd(stream, {b"e": data})
        await redis_client.xadd(stream, {b"e": data})
        transport = rt.transport
        assert isinstance(transport, RedisTransport)

        async def skipped() -> bool:
            return transport.stats().duplicates == 1

        await eventually(skipped, "the duplicate is skipped")
        state = await rt.ref("ledger/dup").ask(GetState())
    assert (state.tokens, state.total) == (["once"], 10)
    # And after a restart (the applied ids are reloaded from Redis), still nothing.
    async with worker(redis_client, redis_config) as rt:
        await redis_client.xadd(stream, {b"e": data})
        state = await rt.ref("ledger/dup").ask(GetState())
    assert (state.tokens, state.total) == (["once"], 10)


async def test_malformed_entries_go_to_the_dead_letters_and_the_consumer_goes_on(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    config = msgspec.structs.replace(redis_config, max_message_bytes=1000)
    keys = Keys(config.prefix)
    address = "ledger/m"
    stream = keys.stream(shard_of(address, config.shards))
    wrong = next(
        f"ledger/w{i}" for i in range(100) if shard_of(f"ledger/w{i}", 4) != shard_of(address, 4)
    )
    bad = {
        "no 'e' field": {b"x": b"1"},
        "not a valid envelope": {b"e": b"\x93garbage"},
        "invalid body": {
            b"e": msgspec.msgpack.encode({"recipient": address, "body": {"type": "Nope"}})
        },
        "over max_message_bytes": {b"e": b"\x00" * 2000},
        "belongs to shard": {
            b"e": default_codec.encode_envelope(Envelope(recipient=wrong, body=Add("w")))
        },
        "no actor kind 'ghost'": {
            b"e": default_codec.encode_envelope(Envelope(recipient="ghost/m", body="boo"))
        },
    }
    ghost_stream = keys.stream(shard_of("ghost/m", config.shards))
    async with worker(redis_client, config) as rt:
        for reason, fields in bad.items():
            await redis_client.xadd(ghost_stream if "ghost" in reason else stream, fields)
        assert await rt.ref(address).ask(Add("after", 1)) == 1

        async def all_dead() -> bool:
            return int(await redis_client.xlen(keys.dead_letters())) >= len(bad)

        await eventually(all_dead, "every bad entry is dead-lettered")
    letters = await redis_client.xrange(keys.dead_letters())
    reasons = [fields[b"reason"].decode() for _, fields in letters]
    for expected in bad:
        assert any(expected in r for r in reasons), (expected, reasons)


async def test_an_entry_on_the_wrong_shard_for_an_actor_held_here_is_dead_lettered(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    keys = Keys(redis_config.prefix)
    address = "ledger/m"
    wrong = next(
        f"ledger/w{i}"
        for i in range(100)
        if shard_of(f"ledger/w{i}", redis_config.shards) != shard_of(address, redis_config.shards)
    )
    stream = keys.stream(shard_of(address, redis_config.shards))
    async with worker(redis_client, redis_config) as rt:
        assert await rt.ref(wrong).ask(Add("own", 1)) == 1  # its record is held from now on
        misrouted = Envelope(recipient=wrong, body=Add("misrouted"), id="m" * 26)
        await redis_client.xadd(stream, {b"e": default_codec.encode_envelope(misrouted)})

        async def dead() -> bool:
            return int(await redis_client.xlen(keys.dead_letters())) == 1

        await eventually(dead, "the misrouted entry is dead-lettered")
        assert (await rt.ref(wrong).ask(GetState())).tokens == ["own"]
    [(_, fields)] = await redis_client.xrange(keys.dead_letters())
    assert b"belongs to shard" in fields[b"reason"]


async def test_a_command_that_keeps_failing_is_dead_lettered_after_max_deliveries(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    keys = Keys(redis_config.prefix)
    config = msgspec.structs.replace(redis_config, claim_idle_ms=200)
    async with worker(redis_client, config) as rt:
        await rt.ref("ledger/f").tell(Boom())
        await rt.ref("ledger/f").tell(Add("ok"))
        # Each failure is retried at once, before the agent's later commands; the
        # asker learns of the failure when the worker gives up.
        with pytest.raises(HandlerError, match="RuntimeError: boom"):
            await rt.ref("ledger/g").ask(Boom())

        async def dead() -> bool:
            return int(await redis_client.xlen(keys.dead_letters())) == 2

        await eventually(dead, "the failing commands are dead-lettered")
        assert (await rt.ref("ledger/f").ask(GetState())).tokens == ["ok"]
        stats = rt.transport.stats()  # type: ignore[attr-defined]
        assert stats.dead_lettered == 2
        assert stats.redelivered >= 2
    [(_, fields), _] = await redis_client.xrange(keys.dead_letters())
    assert b"failed 3 times in a row" in fields[b"reason"]
    envelope = default_codec.decode_envelope(fields[b"e"])
    assert envelope.body == Boom()


async def test_a_worker_that_lost_its_lease_cannot_store_state(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    keys = Keys(redis_config.prefix)
    address = "ledger/s"
    shard = shard_of(address, redis_config.shards)
    async with worker(redis_client, redis_config) as rt:
        await rt.ref(address).ask(Add("before"))
        # Another worker takes the shard over (a larger fencing token).
        await hold_lease_elsewhere(redis_client, redis_config, shard, None)
        await rt.ref(address).tell(Add("stale"))

        async def pending() -> bool:
            summary = await redis_client.xpending(keys.stream(shard), "workers")
            return bool(summary["pending"] == 1)

        await eventually(pending, "the stale worker's command stays pending")
        await anyio.sleep(0.3)  # give a wrongful write every chance to land
    assert await redis_client.lrange(keys.actor_log(shard, address), 0, -1) == [b"before"]


async def test_broadcast_reaches_every_active_actor_of_a_kind(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    async with worker(redis_client, redis_config) as rt:
        for name in ("b1", "b2", "b3"):
            await rt.ref(f"ledger/{name}").ask(Add(f"{name}-own"))
        transport = rt.transport
        assert isinstance(transport, RedisTransport)
        await transport.publish("ledger", Add("news", 10))

        async def everyone_heard() -> bool:
            states = [await rt.ref(f"ledger/b{i}").ask(GetState()) for i in (1, 2, 3)]
            return all(s.total == 11 for s in states)

        await eventually(everyone_heard, "the broadcast reaches all three")
    # The broadcast's effect is durable like any other.
    async with worker(redis_client, redis_config) as rt:
        assert (await rt.ref("ledger/b2").ask(GetState())).tokens == ["b2-own", "news"]


async def test_an_idle_durable_actor_is_passivated_and_reloaded(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    config = msgspec.structs.replace(redis_config, passivate_after=0.2)
    async with worker(redis_client, config) as rt:
        first = await rt.ref("ledger/p").ask(GetState())
        await rt.ref("ledger/p").ask(Add("kept", 4))

        async def gone() -> bool:
            return "ledger/p" not in rt.local_addresses("ledger")

        await eventually(gone, "the idle actor is passivated")
        state = await rt.ref("ledger/p").ask(GetState())
    assert (state.tokens, state.total) == (["kept"], 4)
    assert state.activations > first.activations


async def test_a_failed_command_is_retried_before_its_agent_s_later_commands(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    agents = [f"patient/order{i}" for i in range(3)]
    sent: dict[str, list[str]] = {a: [] for a in agents}
    async with worker(redis_client, redis_config) as rt:
        # Four failures per agent: within a restart budget of 100.
        rt.register("patient", Ledger, supervision=SupervisionConfig(max_restarts=100))
        for n in range(60):
            agent, token = agents[n % 3], f"o{n}"
            sent[agent].append(token)
            # Every fifth command fails once, after changing the ledger in memory.
            await rt.ref(agent).tell(Flaky(token) if n % 5 == 0 else Add(token))
        states = [await rt.ref(a).ask(GetState()) for a in agents]
        stats = rt.transport.stats()  # type: ignore[attr-defined]
    # Each applied once (the failed attempt's change was dropped with the actor),
    # in the order sent, nothing dead-lettered.
    assert {a: s.tokens for a, s in zip(agents, states, strict=True)} == sent
    assert stats.redelivered == 12
    assert stats.dead_lettered == 0


async def test_a_retried_handler_s_tells_are_not_applied_twice(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    # Each relay tells the ledger, then fails and is run again: the second tell
    # carries the same id (derived from the command's), so the ledger skips it.
    async with worker(redis_client, redis_config) as rt:
        # Ten failures in a row: within a restart budget of 100.
        rt.register("relays", Relayer, supervision=SupervisionConfig(max_restarts=100))
        tokens = [f"r{n}" for n in range(10)]
        for token in tokens:
            await rt.ref("relays/a").tell(Relay(token, "ledger/relayed"))

        async def relayed() -> bool:
            return rt.transport.stats().duplicates >= 10  # type: ignore[attr-defined]

        await eventually(relayed, "the second tells are skipped")
        state = await rt.ref("ledger/relayed").ask(GetState())
    assert state.tokens == tokens


@pytest.mark.slow
async def test_streams_are_trimmed_but_never_past_a_pending_entry(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    config = msgspec.structs.replace(redis_config, stream_maxlen=3, shards=1, max_deliveries=100)
    keys = Keys(config.prefix)
    stream = keys.stream(0)
    async with worker(redis_client, config) as rt:
        patient = SupervisionConfig(max_restarts=10_000)
        rt.register("patient", Ledger, supervision=patient)
        for i in range(15):
            await rt.ref("echo/t").tell(i)
        await rt.ref("patient/t").tell(Add("slow", delay=3.0))  # pending while it runs
        for i in range(15):
            await rt.ref("echo/t").tell(i)
        await rt.ref("echo/t").ask("sync")

        async def trimmed() -> bool:
            return int(await redis_client.xlen(stream)) <= 17

        await eventually(trimmed, "the stream is trimmed below the pending entry")
        pending = await redis_client.xpending(stream, "workers")
        assert pending["pending"] == 1
        assert await redis_client.xrange(stream, pending["min"], pending["min"]) != []


class ForgedAdd(msgspec.Struct, frozen=True, tag="ledger.Add"):
    """Looks like ``Add`` on the wire, but with a field of the wrong type."""

    token: str
    amount: str


async def test_an_ask_with_an_invalid_body_fails_at_once(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    forger = Codec((ForgedAdd,))
    async with (
        worker(redis_client, redis_config),
        worker(redis_client, redis_config, worker=False, codec=forger) as client,
    ):
        with pytest.raises(MessageDecodeError, match=r"invalid body: Expected `int`, got `str`"):
            await client.ref("ledger/v").ask(ForgedAdd("t", "three"))
    letters = await redis_client.xrange(Keys(redis_config.prefix).dead_letters())
    assert len(letters) == 1


async def test_a_copy_of_an_ask_with_an_invalid_body_is_skipped_not_dead_lettered(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    # A copy is sent while the reply to its first one is slow; that one was
    # dead-lettered and answered already.
    forger = Codec((ForgedAdd,))
    async with (
        worker(redis_client, redis_config) as rt,
        worker(redis_client, redis_config, worker=False, codec=forger) as client,
    ):
        copy = Envelope(recipient="ledger/v", body=ForgedAdd("t", "three"), id=new_id())
        await client.transport.resend(copy)  # type: ignore[attr-defined]
        ledger = rt.ref("ledger/v")
        await ledger.tell(Add("after"))  # the same stream, behind the copy

        async def after() -> bool:
            return bool((await ledger.ask(GetState())).tokens)

        await eventually(after, "the tell behind the copy applied")
        assert rt.transport.stats().duplicates >= 1  # type: ignore[attr-defined]
    assert await redis_client.xrange(Keys(redis_config.prefix).dead_letters()) == []


async def test_shards_move_between_workers_that_join_and_leave_without_loss(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    keys = Keys(redis_config.prefix)
    addresses = [f"ledger/r{i}" for i in range(8)]
    expected = {a: [f"{a}-{n}" for n in range(15)] for a in addresses}

    async def stored() -> dict[str, list[str]]:
        return {
            a: [
                t.decode()
                for t in await redis_client.lrange(
                    keys.actor_log(shard_of(a, redis_config.shards), a), 0, -1
                )
            ]
            for a in addresses
        }

    async def owners() -> set[bytes]:
        values = [await redis_client.get(keys.lease(s)) for s in range(redis_config.shards)]
        return {v.partition(b":")[2] for v in values if v}

    async with worker(redis_client, redis_config, worker=False) as client:
        async with worker(redis_client, redis_config, worker_id="first"):

            async def first_owns_all() -> bool:
                return await owners() == {b"first"}

            await eventually(first_owns_all, "the first worker takes every shard")
            for n in range(15):
                for a in addresses:
                    await client.ref(a).tell(Add(f"{a}-{n}", delay=0.002))
            async with worker(redis_client, redis_config, worker_id="second"):

                async def both_own() -> bool:
                    return await owners() == {b"first", b"second"}

                await eventually(both_own, "the second worker gets its share")
            # The second leaves gracefully mid-run, then the first: each gives its
            # leases back, and what they had in flight stays pending for the next.

        async def all_released() -> bool:
            return await owners() == set()

        await eventually(all_released, "both left and gave their leases back")
        async with worker(redis_client, redis_config, worker_id="third"):

            async def done() -> bool:
                return await stored() == expected

            await eventually(done, "every command applied once, in order")


@pytest.mark.slow
async def test_producers_wait_while_a_stream_is_full_and_carry_on_when_it_drains(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    config = msgspec.structs.replace(
        redis_config, shards=1, stream_maxlen=5, stream_limit=10, outbox_size=4
    )
    stream = Keys(config.prefix).stream(0)
    async with worker(redis_client, config, worker=False) as client:
        sent = 0

        async def produce() -> None:
            nonlocal sent
            for i in range(40):
                await client.ref("ledger/bp").tell(Add(f"p{i}"))
                sent += 1

        async with anyio.create_task_group() as tg:
            tg.start_soon(produce)

            async def blocked() -> bool:
                return int(await redis_client.xlen(stream)) >= 10 and sent < 40

            await eventually(blocked, "the producer is held back by the full stream")
            # No worker reads the stream: it stays at the limit, the producer waits.
            await anyio.sleep(0.3)
            assert int(await redis_client.xlen(stream)) <= 10  # never past stream_limit
            assert sent < 40
            async with worker(redis_client, config) as rt:

                async def all_sent() -> bool:
                    return sent == 40

                await eventually(all_sent, "the producer carries on once workers drain it")
                await client.transport.flush()  # type: ignore[attr-defined]
                state = await client.ref("ledger/bp").ask(GetState())
                assert state.tokens == [f"p{i}" for i in range(40)]
                assert rt.transport.stats().owned_shards == [0]  # type: ignore[attr-defined]


async def test_a_read_that_fills_a_mailbox_waits_for_room_and_loses_nothing(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    # One read brings 30 commands for an actor whose mailbox holds 2: the intake
    # waits for room for each after the second, in stream order.
    config = msgspec.structs.replace(redis_config, shards=1)
    async with worker(redis_client, config, worker=False) as client:
        for i in range(30):
            await client.ref("ledger/full").tell(Add(f"f{i}", 1))
        await client.transport.flush()  # type: ignore[attr-defined]
        transport = RedisTransport(redis_client, config)
        runtime = RuntimeConfig(ask_timeout=10.0, mailbox_size=2)
        async with Runtime(runtime, transport=transport) as rt:
            register(rt)
            state = await client.ref("ledger/full").ask(GetState())
            assert state.tokens == [f"f{i}" for i in range(30)]
            assert state.total == 30
            stats = transport.stats()
            assert stats.duplicates == 0
            assert stats.dead_lettered == 0


async def test_the_transport_factory_fixture_gives_a_working_transport(
    make_redis_transport: Callable[[], RedisTransport],
) -> None:
    async with Runtime(transport=make_redis_transport()) as rt:
        register(rt)
        assert await rt.ref("echo/f").ask("from the factory") == "from the factory"


def test_every_transport_has_its_own_id_even_within_one_process() -> None:
    # The id names the reply stream and the lease holder: two sharing one would
    # read each other's replies and defeat the fencing between them.
    ids = {RedisTransport("redis://unused", RedisConfig()).id for _ in range(50)}
    assert len(ids) == 50


async def test_an_actor_whose_changes_cannot_be_taken_fails_the_ask_at_once(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    async with worker(redis_client, redis_config) as rt:
        rt.register("brittle", Brittle)
        with pytest.raises(HandlerError, match="durable_changes failed: ValueError: cannot encode"):
            await rt.ref("brittle/b").ask(Add("x"))
    # Nothing was stored, and the command stays pending for another try.
    keys = Keys(redis_config.prefix)
    shard = shard_of("brittle/b", redis_config.shards)
    assert await redis_client.llen(keys.actor_log(shard, "brittle/b")) == 0
    assert (await redis_client.xpending(keys.stream(shard), "workers"))["pending"] == 1


async def test_an_unreachable_redis_is_one_clear_error_when_the_runtime_opens() -> None:
    config = RedisConfig(socket_timeout=0.3)
    transport = RedisTransport(f"redis://127.0.0.1:{free_port()}", config)
    with pytest.raises(TransportUnavailableError, match="Redis unavailable"):
        async with Runtime(transport=transport):
            pass


async def test_a_client_trims_the_replies_it_has_read_and_loses_none_in_a_burst(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    # 1,000 asks at once: every reply reaches its asker, and the client's reply
    # stream keeps only what it has not read yet (writers trim only a client far
    # behind, so a reader that lags under load does not lose replies). A lost reply
    # fails its ask when it times out; the timeout is long because the worker's pace
    # is the machine's (an ask unanswered in half a lease is also sent again, which
    # adds to the burst), and this test is about loss, not latency.
    async with worker_and_client(redis_client, redis_config) as (_, client):
        answers: list[str] = []
        burst = 1_000

        async def one(i: int) -> None:
            answers.append(await client.ref(f"echo/b{i % 50}").ask(f"q{i}", timeout=60.0))

        async with anyio.create_task_group() as tg:
            for i in range(burst):
                tg.start_soon(one, i)
        assert sorted(answers) == sorted(f"q{i}" for i in range(burst))
        stream = Keys(redis_config.prefix).replies(client.transport.id)  # type: ignore[attr-defined]

        async def trimmed() -> bool:
            return int(await redis_client.xlen(stream)) == 0

        await eventually(trimmed, "the read replies are trimmed off")


@pytest.mark.slow
async def test_an_ask_that_expired_in_the_stream_is_acked_unhandled(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    """Past capacity a worker skips asks nobody waits for: the command is acked (not
    redelivered, not dead-lettered) without running, and the agent goes on."""
    keys = Keys(redis_config.prefix)
    stream = keys.stream(shard_of("ledger/s", redis_config.shards))
    async with worker_and_client(redis_client, redis_config) as (rt, client):
        ledger = client.ref("ledger/s")
        await ledger.tell(Add("busy", delay=0.5))
        with pytest.raises(AskTimeoutError):
            await ledger.ask(Add("late"), timeout=0.1)
        await ledger.tell(Add("after"))
        assert (await ledger.ask(GetState())).tokens == ["busy", "after"]
        assert rt.stats().expired == 1
        transport = rt.transport
        assert isinstance(transport, RedisTransport)

        async def acked() -> bool:
            pending = await redis_client.xpending(stream, CONSUMER_GROUP)
            return bool(pending["pending"] == 0)

        await eventually(acked, "every entry acked")
        assert transport.stats().redelivered == 0
        assert await redis_client.xlen(keys.dead_letters()) == 0
    # The next worker does not run it either.
    async with worker(redis_client, redis_config) as rt:
        assert (await rt.ref("ledger/s").ask(GetState())).tokens == ["busy", "after"]


async def test_large_batches_are_split_into_calls_of_bounded_size_in_order(
    redis_client: aioredis.Redis, redis_config: RedisConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Redis holds a whole call in its query buffer: the outbox's XADDs and the group
    # commits are cut into calls of about _CALL_BYTES / _COMMIT_BYTES (tiny here).
    from actormem.runtime.redis import _commits, _outbox

    monkeypatch.setattr(_outbox, "_CALL_BYTES", 300)
    monkeypatch.setattr(_commits, "_COMMIT_BYTES", 40)
    agents = ["ledger/big0", "ledger/big1"]
    async with worker_and_client(redis_client, redis_config) as (_rt, asker):
        for n in range(120):
            await asker.ref(agents[n % 2]).tell(Add(f"token-{n:03}-" + "x" * 20))
        states = [await asker.ref(a).ask(GetState()) for a in agents]
    keys = Keys(redis_config.prefix)
    for i, (address, state) in enumerate(zip(agents, states, strict=True)):
        expected = [f"token-{n:03}-" + "x" * 20 for n in range(i, 120, 2)]
        assert state.tokens == expected
        log_key = keys.actor_log(shard_of(address, redis_config.shards), address)
        assert [t.decode() for t in await redis_client.lrange(log_key, 0, -1)] == expected


async def test_a_client_restarted_under_its_name_never_takes_its_predecessor_s_reply(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    # The first client stops while its ask is being handled; the reply lands on the
    # reply stream the second client (same id, so the same stream) reads while its
    # own ask waits.
    async with worker(redis_client, redis_config):
        async with worker(redis_client, redis_config, worker=False, worker_id="same") as first:
            with anyio.move_on_after(0.3):
                await first.ref("ledger/slow").ask(Add("slow", 100, delay=1.0), timeout=10)
        async with worker(redis_client, redis_config, worker=False, worker_id="same") as second:
            total = await second.ref("ledger/other").ask(Add("mine", 1, delay=1.5))
    assert total == 1
