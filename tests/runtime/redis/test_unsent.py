"""The tells a handler sent are kept with its command's commit until they are written,
and a worker taking a shard sends again what an earlier owner kept."""

from __future__ import annotations

import hashlib
from typing import Any, NamedTuple

import anyio
import msgspec
import pytest
import redis.asyncio as aioredis

from actormem.runtime._envelope import Envelope
from actormem.runtime.redis import Keys, RedisConfig, _scripts, connect, default_codec, shard_of
from tests.runtime.redis.test_transport import worker
from tests.support.actors import Add, GetState, Pass
from tests.support.streams import eventually

pytestmark = pytest.mark.anyio

XADD_SHA = hashlib.sha1(_scripts.XADD_MANY.encode()).hexdigest()
COMMIT_SHA = hashlib.sha1(_scripts.COMMIT.encode()).hexdigest()


class HeldRedis(aioredis.Redis):
    """A client whose calls of the script ``sha`` with ``key`` first wait for ``gate``."""

    sha: str
    key: str
    gate: anyio.Event
    held = 0

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        if args[0] == "EVALSHA" and args[1] == self.sha and args[3] == self.key:
            if not self.gate.is_set():
                self.held += 1
            await self.gate.wait()
        return await super().execute_command(*args, **options)


def held(config: RedisConfig, sha: str, key: str) -> HeldRedis:
    client = HeldRedis.from_pool(connect(config).connection_pool)
    client.sha, client.key, client.gate = sha, key, anyio.Event()
    return client


async def hash_writes(client: aioredis.Redis) -> int:
    """HSET and HDEL calls the server ran so far (scripts' included)."""
    stats = await client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("hset", "hdel"))


class Layout(NamedTuple):
    """A relay and a sink ledger on different shards, and the key names."""

    relay: str
    sink: str
    relay_shard: int
    sink_shard: int
    keys: Keys


def layout(config: RedisConfig) -> Layout:
    sink = "ledger/sink"
    relay = next(
        f"ledger/relay{i}"
        for i in range(100)
        if shard_of(f"ledger/relay{i}", config.shards) != shard_of(sink, config.shards)
    )
    return Layout(
        relay,
        sink,
        shard_of(relay, config.shards),
        shard_of(sink, config.shards),
        Keys(config.prefix),
    )


async def test_tells_not_written_when_their_command_is_stored_are_kept_until_written(
    redis_config: RedisConfig, redis_client: aioredis.Redis
) -> None:
    relay, sink, relay_shard, sink_shard, keys = layout(redis_config)
    unsent = keys.unsent(relay_shard)
    client = held(redis_config, XADD_SHA, keys.stream(sink_shard))
    try:
        # The worker's outbox writes nothing to the sink's stream until the gate
        # opens; the asks come from a client of their own.
        async with (
            worker(client, redis_config),
            worker(redis_client, redis_config, worker=False) as rt,
        ):
            await rt.ref(relay).ask(Pass("told", sink))
            await rt.ref(relay).tell(Pass("handed", sink, forward=True))

            async def kept() -> bool:
                return int(await redis_client.hlen(unsent)) == 2  # type: ignore[misc]

            # Both commands are stored and acked while their tells wait to be written.
            await eventually(kept, "the tells kept with their commands")
            assert (await rt.ref(relay).ask(GetState())).tokens == ["told"]
            assert await redis_client.xlen(client.key) == 0
            client.gate.set()

            async def forgotten() -> bool:
                return not await redis_client.exists(unsent)

            await eventually(forgotten, "the kept tells deleted once written")
            assert (await rt.ref(sink).ask(GetState())).tokens == ["told", "handed"]
    finally:
        await client.aclose()


async def test_tells_written_before_their_command_is_stored_cost_no_hash_write(
    redis_config: RedisConfig, redis_client: aioredis.Redis
) -> None:
    relay, sink, relay_shard, sink_shard, keys = layout(redis_config)
    sink_log = keys.actor_log(sink_shard, sink)
    client = held(redis_config, COMMIT_SHA, keys.lease(relay_shard))
    try:
        async with (
            worker(client, redis_config),
            worker(redis_client, redis_config, worker=False) as rt,
        ):
            client.gate.set()
            await rt.ref(relay).ask(Add("warm"))  # the relay's commits wait from now on
            client.gate = anyio.Event()
            before = await hash_writes(redis_client)
            # The commit of "first" is in flight (held) while the relay handles the
            # Pass and its tell is written and applied: the next commit, built once
            # the first is done, finds it written.
            await rt.ref(relay).tell(Add("first"))

            async def in_flight() -> bool:
                return client.held == 1

            await eventually(in_flight, "the first commit held")
            await rt.ref(relay).tell(Pass("told", sink))

            async def written() -> bool:
                return await redis_client.lrange(sink_log, 0, -1) == [b"told"]

            await eventually(written, "the tell applied before its command is stored")
            client.gate.set()
            assert (await rt.ref(relay).ask(GetState())).tokens == ["warm", "first", "told"]
            # Commands that send nothing keep nothing either.
            for n in range(20):
                await rt.ref(relay).ask(Add(f"plain{n}"))
            assert await hash_writes(redis_client) == before
    finally:
        await client.aclose()


async def test_a_new_owner_sends_kept_tells_again_in_order_and_each_is_applied_once(
    redis_config: RedisConfig, redis_client: aioredis.Redis
) -> None:
    relay, sink, relay_shard, sink_shard, keys = layout(redis_config)
    async with worker(redis_client, redis_config) as rt:
        await rt.ref(sink).ask(Add("t0"))
    (applied,) = await redis_client.zrange(keys.actor_applied(sink_shard, sink), 0, -1)

    def record(entry: str, n: int, tell: str, token: str) -> bytes:
        data = default_codec.encode_envelope(
            Envelope(recipient=sink, body=Add(token), id=tell, sender=relay)
        )
        return msgspec.msgpack.encode((entry, n, keys.stream(sink_shard), data, None))

    # What an owner that died after its commits left: the tell of an earlier command
    # (applied already) and two of a later one, stored in no particular order.
    await redis_client.hset(
        keys.unsent(relay_shard),
        mapping={
            "c2.2": record("200-0", 1, "c2.2", "t2"),
            applied.decode(): record("100-0", 0, applied.decode(), "t0"),
            "c2.1": record("200-0", 0, "c2.1", "t1"),
            "unreadable": b"\xc1",  # dropped, and the others sent all the same
        },
    )
    async with worker(redis_client, redis_config) as rt:

        async def sent_again() -> bool:
            return (await rt.ref(sink).ask(GetState())).tokens == ["t0", "t1", "t2"]

        await eventually(sent_again, "the kept tells applied")
        assert rt.transport.stats().duplicates >= 1  # type: ignore[attr-defined]
    assert await redis_client.exists(keys.unsent(relay_shard)) == 0
