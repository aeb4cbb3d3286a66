"""Over Redis: envelopes no actor can take are dead-lettered and the worker serves on;
a stopped actor comes back after its back-off; dead letters can be requeued."""

from __future__ import annotations

import anyio
import msgspec
import pytest
import redis.asyncio as aioredis

from actormem.runtime import (
    ActorContext,
    ActorNotFoundError,
    ActorStoppedError,
    HandlerError,
    InvalidAddressError,
    SupervisionConfig,
)
from actormem.runtime._envelope import Envelope
from actormem.runtime.redis import (
    Keys,
    RedisConfig,
    default_codec,
    requeue_dead_letters,
    shard_of,
)
from actormem.runtime.redis.transport import RedisTransport
from tests.runtime.redis.test_transport import worker
from tests.support.actors import Add, Boom, GetState, Ledger
from tests.support.streams import client_runtime, eventually

pytestmark = pytest.mark.anyio


def picky(ctx: ActorContext) -> Ledger:
    """A factory that refuses keys starting with ``no``."""
    if ctx.key.startswith("no"):
        raise LookupError(f"no ledger may be called {ctx.key!r}")
    return Ledger(ctx)


async def letters(client: aioredis.Redis, config: RedisConfig) -> dict[str, str]:
    """The dead letters: ``"<stream> <entry>"`` each came from -> its reason."""
    found = await client.xrange(Keys(config.prefix).dead_letters())
    return {
        f"{f[b'stream'].decode()} {f[b'entry'].decode()}": f[b"reason"].decode() for _, f in found
    }


async def test_bad_addresses_are_dead_lettered_and_the_shard_is_served_on(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    keys = Keys(redis_config.prefix)
    bad = {
        "memory/": "the key (after '/') is empty",
        # A registered kind: the address that used to kill every worker of its shard.
        "ledger/": "the key (after '/') is empty",
        "ledger": "it has no '/'",
        "memory": "it has no '/'",
        "pool/": "the key (after '/') is empty",
        "/x": "the kind (before '/') is empty",
        "ledger/a\x00b": "control characters",
        "ghost/x": "no actor kind 'ghost' is registered",
        "picky/nobody": "the factory of kind 'picky' refused the address: LookupError",
    }
    async with worker(redis_client, redis_config) as rt, client_runtime(redis_config) as client:
        rt.register("picky", picky)
        transport = rt.transport
        assert isinstance(transport, RedisTransport)
        # The sending side refuses a bad address before anything is queued.
        for address in ("memory/", "memory", "pool/"):
            with pytest.raises(InvalidAddressError, match="invalid actor address"):
                await client.tell(address, Add("x"))
            with pytest.raises(InvalidAddressError):
                await client.ask(address, GetState())
        # A producer that skips the check (any client may XADD): straight into the streams.
        entries: dict[str, str] = {}
        for address in bad:
            shard = shard_of(address, redis_config.shards)
            data = default_codec.encode_envelope(Envelope(recipient=address, body=Add("p")))
            entry = await redis_client.xadd(keys.stream(shard), {b"e": data})
            entries[f"{keys.stream(shard)} {entry.decode()}"] = address

        async def all_dead() -> bool:
            return set(entries) <= set(await letters(redis_client, redis_config))

        await eventually(all_dead, "every bad entry is dead-lettered")
        reasons = await letters(redis_client, redis_config)
        for entry, address in entries.items():
            assert bad[address] in reasons[entry], (address, reasons[entry])
        # Every shard is still served (one ledger per shard), by the same worker.
        ledgers = {shard_of(f"ledger/s{i}", redis_config.shards): f"ledger/s{i}" for i in range(50)}
        for address in ledgers.values():
            assert await client.ask(address, Add("after")) == 1
        assert await client.ask("picky/yes", Add("fine")) == 1
        stats = rt.stats()
        assert (stats.failures, stats.restarts) == (0, 0)
        # An ask refused by the factory is answered at once, with the reason.
        with pytest.raises(ActorNotFoundError, match="refused the address"):
            await client.ask("picky/nope", GetState())


async def test_a_stopped_actor_comes_back_after_its_back_off_and_its_refusals_requeue(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    keys = Keys(redis_config.prefix)
    supervision = SupervisionConfig(max_restarts=1, within_seconds=60, backoff_seconds=1.0)
    victim = "crashy/v"
    async with worker(redis_client, redis_config) as rt, client_runtime(redis_config) as client:
        rt.register("crashy", Ledger, supervision=supervision)
        assert await client.ask(victim, Add("before")) == 1
        for _ in range(2):  # a restart, then the second failure stops it
            with pytest.raises(HandlerError, match="boom"):
                await client.ask(victim, Boom())
        assert "more than 1 restarts" in (rt.stop_reason(victim) or "")
        refused = [f"late{n}" for n in range(3)]
        for token in refused:
            with pytest.raises(ActorStoppedError, match=r"no messages for .*s more"):
                await client.ask(victim, Add(token))
        await client.tell(victim, Add("told"))
        refused.append("told")

        async def all_refused() -> bool:
            reasons = (await letters(redis_client, redis_config)).values()
            return sum("no messages for" in r for r in reasons) == len(refused)

        await eventually(all_refused, "the refused commands are dead-lettered")
        assert rt.stats().stopped == 1

        async def over() -> bool:
            return rt.stop_reason(victim) is None

        await eventually(over, "the back-off ends")
        # The next command brings it back from its stored state.
        assert (await client.ask(victim, GetState())).tokens == ["before"]
        # Requeue what it refused; a letter requeued twice (a requeue cut off before
        # it deleted the letter) is applied once.
        dlq = keys.dead_letters()
        first_id, first = (await redis_client.xrange(dlq))[-1]
        await redis_client.xadd(dlq, first)
        requeued = await requeue_dead_letters(
            redis_client, redis_config, recipient=victim, reason="no messages for"
        )
        assert len(requeued) == len(refused) + 1
        assert first_id.decode() in requeued

        async def applied() -> bool:
            state = await client.ask(victim, GetState())
            return bool(len(state.tokens) >= 1 + len(refused))

        await eventually(applied, "the requeued commands are applied")
        await anyio.sleep(0.3)  # a duplicate would land now
        state = await client.ask(victim, GetState())
        assert state.tokens[0] == "before"
        assert sorted(state.tokens[1:]) == sorted(refused)
        # The Booms stay dead letters; the requeued letters are gone.
        remaining = await letters(redis_client, redis_config)
        assert len(remaining) == 2
        assert all("the handler failed" in r for r in remaining.values()), remaining


async def test_requeue_leaves_letters_that_hold_no_command(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    keys = Keys(redis_config.prefix)
    dlq = keys.dead_letters()
    await redis_client.xadd(dlq, {b"reason": b"garbage", b"e": b"\x93nope"})
    await redis_client.xadd(dlq, {b"reason": b"no e field"})
    bad_address = msgspec.msgpack.encode({"recipient": "memory/", "body": 1})
    await redis_client.xadd(dlq, {b"reason": b"bad address", b"e": bad_address})
    assert await requeue_dead_letters(redis_client, redis_config) == []
    assert await redis_client.xlen(dlq) == 3
