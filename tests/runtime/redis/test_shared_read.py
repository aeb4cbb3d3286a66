"""A worker reads every shard it owns with one blocking read: a shard it gains joins
the read in flight, one it gives back leaves it (its next owner reads what comes),
an ask's ack goes after its reply, in the same write, and a tell's with the next
read, each only once it was handled, and entries claimed after a takeover are noted
by the hand-over as read ones are."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, ClassVar

import anyio
import msgspec
import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from actormem.runtime import Actor, Runtime
from actormem.runtime._envelope import Envelope
from actormem.runtime.ids import new_id
from actormem.runtime.redis import CONSUMER_GROUP, Keys, RedisConfig, shard_of
from actormem.runtime.redis._client import script_sha
from actormem.runtime.redis._handover import Handover
from actormem.runtime.redis._scripts import ACK_MANY, XADD_MANY
from actormem.runtime.redis._shards import Holdings, Shard
from actormem.runtime.redis._wire import Wire
from actormem.runtime.redis.codec import default_codec
from tests.runtime.redis.test_transport import worker
from tests.support.actors import Add, GetState
from tests.support.handover import redis_transport
from tests.support.redis import hold_lease_elsewhere
from tests.support.streams import eventually, stored_tokens

pytestmark = pytest.mark.anyio

#: Longer than any ask here waits: a read that only ended by itself would fail it.
_LONG_BLOCK_MS = 60_000


def _one_per_shard(kind: str, shards: int) -> list[str]:
    """An address of ``kind`` on each shard, by shard number."""
    found: dict[int, str] = {}
    i = 0
    while len(found) < shards:
        address = f"{kind}/a{i}"
        found.setdefault(shard_of(address, shards), address)
        i += 1
    return [found[s] for s in range(shards)]


async def test_a_shard_gained_while_the_read_waits_joins_it(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    config = msgspec.structs.replace(redis_config, block_ms=_LONG_BLOCK_MS)
    address = "echo/late"
    late = shard_of(address, config.shards)
    # Another worker holds one shard for a moment: the worker reads the others (one
    # read, waiting for a minute) before it gains that one.
    await hold_lease_elsewhere(redis_client, config, late)
    async with (
        worker(redis_client, config) as rt,
        worker(redis_client, config, worker=False) as asker,
    ):
        transport = redis_transport(rt)

        async def owns(count: int) -> bool:
            return len(transport.owned_shards()) == count

        await eventually(lambda: owns(config.shards - 1), "the free shards are owned")
        await eventually(lambda: owns(config.shards), "the held shard is gained")
        assert await asker.ref(address).ask("to the late shard") == "to the late shard"
        for other in _one_per_shard("echo", config.shards):
            assert await asker.ref(other).ask(other) == other


async def test_a_shard_given_back_leaves_the_read_and_its_next_owner_reads_it(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    config = msgspec.structs.replace(
        redis_config, block_ms=_LONG_BLOCK_MS, claim_idle_ms=_LONG_BLOCK_MS
    )
    agents = _one_per_shard("ledger", config.shards)
    async with (
        worker(redis_client, config, worker_id="first") as first,
        worker(redis_client, config, worker=False) as asker,
    ):
        await eventually(
            lambda: _owns_all(first, config.shards), "the first worker owns every shard"
        )
        for agent in agents:
            await asker.ref(agent).ask(Add(f"{agent}-1"))
        async with worker(redis_client, config, worker_id="second") as second:
            await eventually(lambda: _shares(first, second, config.shards), "the shards are shared")
            # Were a shard given back still in the first worker's read (waiting for a
            # minute), that read would take its entries and leave them pending, and
            # their asks would time out: its next owner claims them only after
            # claim_idle_ms.
            for agent in agents:
                await asker.ref(agent).ask(Add(f"{agent}-2"))
            states = [await asker.ref(agent).ask(GetState()) for agent in agents]
    assert [s.tokens for s in states] == [[f"{a}-1", f"{a}-2"] for a in agents]
    stored = await stored_tokens(redis_client, config, agents)
    assert stored == {a: [f"{a}-1", f"{a}-2"] for a in agents}


async def _owns_all(rt: Runtime, shards: int) -> bool:
    return len(redis_transport(rt).owned_shards()) == shards


async def _shares(first: Runtime, second: Runtime, shards: int) -> bool:
    mine, theirs = redis_transport(first).owned_shards(), redis_transport(second).owned_shards()
    return bool(mine) and bool(theirs) and len(mine) + len(theirs) == shards


class Slow(Actor):
    """Not durable: answers once :attr:`go` is set (its entry is acked with a read)."""

    go: ClassVar[anyio.Event]

    async def receive(self, message: Any) -> Any:
        await Slow.go.wait()
        return message


@pytest.mark.parametrize("asked", [True, False], ids=["ask", "tell"])
async def test_a_handled_entry_is_acked_after_its_reply_or_with_a_read_and_not_before(
    redis_client: aioredis.Redis,
    redis_config: RedisConfig,
    monkeypatch: pytest.MonkeyPatch,
    asked: bool,
) -> None:
    keys = Keys(redis_config.prefix)
    address = "slow/one"
    shard = shard_of(address, redis_config.shards)
    stream = keys.stream(shard)
    pipelines: list[list[tuple[Any, ...]]] = []
    pipeline = Wire.pipeline

    async def recorded(self: Wire, commands: list[tuple[Any, ...]]) -> list[Any]:
        pipelines.append(list(commands))
        return await pipeline(self, commands)

    monkeypatch.setattr(Wire, "pipeline", recorded)
    Slow.go = anyio.Event()
    async with (
        worker(redis_client, redis_config) as rt,
        worker(redis_client, redis_config, worker=False) as asker,
    ):
        rt.register("slow", Slow)
        await eventually(lambda: _owns_all(rt, redis_config.shards), "every shard is owned")
        reply_stream = keys.replies(redis_transport(asker).id)
        async with anyio.create_task_group() as tg:
            if asked:
                tg.start_soon(asker.ref(address).ask, "slow")
            else:
                await asker.ref(address).tell("slow")

            async def pending() -> list[Any]:
                try:
                    return list(
                        await redis_client.xpending_range(stream, CONSUMER_GROUP, "-", "+", 10)
                    )
                except ResponseError as exc:
                    # The ask's XADD may make the stream before the reader makes its group.
                    if "NOGROUP" not in str(exc):
                        raise
                    return []

            await eventually(lambda: _has(pending), "the entry is read")
            entry = (await pending())[0]["message_id"].decode()  # the ask (copies come after)
            # Reads go on (each with the acks of what was handled) while it is handled.
            reads = len(pipelines)
            await eventually(lambda: _more(pipelines, reads + 3), "more reads")
            # (A copy of the ask, sent again for want of a reply, may be pending too.)
            assert entry in [i["message_id"].decode() for i in await pending()]
            Slow.go.set()
        await eventually(lambda: _not(pending), "the entry is acked")
    sha = script_sha(ACK_MANY)
    carrying = [
        (commands, i)
        for commands in pipelines
        for i, command in enumerate(commands)
        if command[:2] == ("EVALSHA", sha) and entry in command and stream in command
    ]
    assert len(carrying) == 1, "the entry was acked once"
    commands, ack = carrying[0]
    reply = ("EVALSHA", script_sha(XADD_MANY), 1, reply_stream)
    if asked:
        # In the reply outbox's write, after the reply: one write for both.
        assert any(command[:4] == reply for command in commands[:ack])
        assert commands[-1][0] != "XREADGROUP"
    else:
        assert commands[-1][0] == "XREADGROUP"


async def _has(check: Any) -> bool:
    return bool(await check())


async def _not(check: Any) -> bool:
    return not await check()


async def _more(pipelines: list[Any], count: int) -> bool:
    return len(pipelines) >= count


async def test_entries_claimed_after_a_takeover_are_noted_by_the_handover(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    keys = Keys(redis_config.prefix)
    address = "ledger/claimed"
    shard = shard_of(address, redis_config.shards)
    stream = keys.stream(shard)
    await redis_client.xgroup_create(stream, CONSUMER_GROUP, id="0", mkstream=True)
    tokens = ["c1", "c2", "c3"]
    for token in tokens:
        envelope = Envelope(recipient=address, body=Add(token), id=new_id())
        await redis_client.xadd(stream, {b"e": default_codec.encode_envelope(envelope)})
    # A worker read them and died: they are pending, under its name.
    read = await redis_client.xreadgroup(CONSUMER_GROUP, "dead", {stream: ">"}, count=10)
    ids = [entry.decode() for entry, _ in read[0][1]]
    async with worker(redis_client, redis_config) as rt:
        handover = redis_transport(rt)._handover

        async def noted() -> bool:
            track = handover._tracks.get(shard)
            return track is not None and track.after == ids[-1]

        await eventually(noted, "the hand-over noted the claimed entries")
        # The asks it hands over to their actor go after them.
        state = await rt.ref(address).ask(GetState())
    assert state.tokens == tokens
    assert (await stored_tokens(redis_client, redis_config, [address]))[address] == tokens


async def test_an_entry_claimed_later_does_not_move_the_handover_back() -> None:
    link: Any = SimpleNamespace(codec=default_codec)
    held = Holdings()
    shard = held.shards[0] = Shard(0, "1:w")
    handover = Handover(
        link,
        held=held,
        own_stream="replies",
        lease_fresh=lambda _: True,
        written=lambda: 0,
        queued=lambda: 0,
        streams=["s0"],
    )
    handover.gained(shard)
    track = handover._tracks[0]
    handover.read(shard, [("5-0", None, None), ("7-1", None, None)], False)
    assert track.after == "7-1"
    handover.read(shard, [("6-9", None, None)], False)  # claimed: older than what was read
    assert track.after == "7-1"
    handover.read(shard, [("10-0", None, None)], True)
    assert track.after == "10-0"
