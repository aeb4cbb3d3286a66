"""The acks of handled entries go after the replies the reply outbox writes, in the
same pipeline: once per write that empties its queue, never ahead of a reply still
queued; an ack under a lease no longer ours is refused (and logged); a write that
fails keeps its acks queued, and a later one sends them."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis
import redis.exceptions as rexc
from structlog.testing import capture_logs

from actormem.runtime.errors import TransportUnavailableError
from actormem.runtime.redis import CONSUMER_GROUP, Keys, RedisConfig
from actormem.runtime.redis._acks import Acks
from actormem.runtime.redis._client import connect, script_sha
from actormem.runtime.redis._outbox import _BATCH, NO_DEADLINE, Outbox
from actormem.runtime.redis._scripts import ACK_MANY
from actormem.runtime.redis._shards import Shard
from actormem.runtime.redis._wire import Wire, wire

pytestmark = pytest.mark.anyio

_LEASE = "7:worker-a"
#: How an ack call begins.
_ACK_CALL = ("EVALSHA", script_sha(ACK_MANY))


async def _pending_entries(
    client: aioredis.Redis, keys: Keys, count: int, shard: int = 0
) -> list[str]:
    """``count`` entries of ``shard``'s stream, read by a worker: pending."""
    stream = keys.stream(shard)
    await client.xgroup_create(stream, CONSUMER_GROUP, id="0", mkstream=True)
    for i in range(count):
        await client.xadd(stream, {b"e": f"ask{i}".encode()})
    read = await client.xreadgroup(CONSUMER_GROUP, "worker-a", {stream: ">"})
    return [entry.decode() for entry, _ in read[0][1]]


async def _pending(client: aioredis.Redis, keys: Keys, shard: int = 0) -> list[str]:
    found = await client.xpending_range(keys.stream(shard), CONSUMER_GROUP, "-", "+", 100)
    return [item["message_id"].decode() for item in found]


class _Outbox:
    """A reply outbox on the test's Redis whose writes carry the acks of ``shard``,
    each write's pipeline recorded."""

    def __init__(self, config: RedisConfig, shard: Shard, monkeypatch: pytest.MonkeyPatch) -> None:
        self.client = connect(config)
        self.keys = Keys(config.prefix)
        self.outbox = Outbox(lambda: self.client, 10_000, 100_000)
        self.riders_taken = 0

        def riders() -> Acks | None:
            self.riders_taken += 1
            acks = Acks(self.keys, [shard], self.client)
            return acks if acks else None

        self.outbox.riders = riders
        self.pipelines: list[list[tuple[Any, ...]]] = []
        pipeline = Wire.pipeline

        async def recorded(wire: Wire, commands: list[tuple[Any, ...]]) -> list[Any]:
            self.pipelines.append(list(commands))
            return await pipeline(wire, commands)

        monkeypatch.setattr(Wire, "pipeline", recorded)

    def acks_in(self, commands: list[tuple[Any, ...]]) -> list[str]:
        """The entries of shard 0 the ack calls among ``commands`` ack."""
        return [e for c in commands if c[:2] == _ACK_CALL for e in c[8:]]


async def _set_up(
    client: aioredis.Redis,
    config: RedisConfig,
    monkeypatch: pytest.MonkeyPatch,
    entries: int,
    lease: str = _LEASE,
) -> tuple[Keys, list[str], Shard, _Outbox]:
    """``entries`` pending on shard 0, whose lease in Redis is ``lease``, and a reply
    outbox that takes the acks of shard 0 held under :data:`_LEASE`."""
    keys = Keys(config.prefix)
    pending = await _pending_entries(client, keys, entries)
    await client.set(keys.lease(0), lease)
    await client.script_load(ACK_MANY)
    shard = Shard(0, _LEASE)
    return keys, pending, shard, _Outbox(config, shard, monkeypatch)


async def test_acks_go_after_the_replies_in_the_write_that_empties_the_queue(
    redis_client: aioredis.Redis, redis_config: RedisConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys, entries, shard, box = await _set_up(redis_client, redis_config, monkeypatch, 3)
    replies = keys.replies("asker")
    # More replies than one batch holds: the acks wait for the batch that ends the queue.
    for i in range(_BATCH + 1):
        box.outbox.put_nowait((replies, f"r{i}".encode(), NO_DEADLINE))
    shard.acks.extend(entries)
    await box.outbox.write_all()
    await box.client.aclose()
    assert box.riders_taken == 1  # for the last batch only
    (last,) = box.pipelines  # (the first batch is one call, not a pipeline)
    assert box.acks_in(last) == entries
    assert last[0][3] == replies and last[-1][:2] == _ACK_CALL
    assert shard.acks == []
    assert await _pending(redis_client, keys) == []
    assert await redis_client.xlen(replies) == _BATCH + 1


async def test_an_ack_under_a_lease_no_longer_ours_is_refused(
    redis_client: aioredis.Redis, redis_config: RedisConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Taken over by another worker.
    keys, entries, shard, box = await _set_up(
        redis_client, redis_config, monkeypatch, 2, "8:worker-b"
    )
    box.outbox.put_nowait((keys.replies("asker"), b"r", NO_DEADLINE))
    shard.acks.extend(entries)
    with capture_logs() as logs:
        await box.outbox.write_all()
    await box.client.aclose()
    assert box.acks_in(box.pipelines[0]) == entries
    assert [e["event"] for e in logs if e["event"].startswith("ack")] == ["ack_fenced_off"]
    assert await _pending(redis_client, keys) == entries  # for the shard's owner
    assert await redis_client.xlen(keys.replies("asker")) == 1


async def test_a_write_that_fails_keeps_its_acks_and_a_later_one_sends_them(
    redis_client: aioredis.Redis, redis_config: RedisConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys, entries, shard, box = await _set_up(redis_client, redis_config, monkeypatch, 2)
    replies = keys.replies("asker")
    box.outbox.put_nowait((replies, b"r1", NO_DEADLINE))
    shard.acks.extend(entries)
    recorded = Wire.pipeline

    async def away(wire: Wire, commands: list[tuple[Any, ...]]) -> list[Any]:
        raise rexc.ConnectionError("Redis went away")

    monkeypatch.setattr(Wire, "pipeline", away)
    with pytest.raises(TransportUnavailableError):
        await box.outbox.write_all()
    assert shard.acks == entries  # queued again
    assert len(box.outbox) == 1  # and so is the reply
    assert await _pending(redis_client, keys) == entries
    monkeypatch.setattr(Wire, "pipeline", recorded)
    shard.acks.append("0-1")  # handled meanwhile: goes after them
    await box.outbox.write_all()
    await box.client.aclose()
    assert box.acks_in(box.pipelines[-1]) == [*entries, "0-1"]
    assert await _pending(redis_client, keys) == []
    assert await redis_client.xlen(replies) == 1


async def test_one_call_acks_every_shard_whose_lease_is_ours_loading_its_script(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    keys = Keys(redis_config.prefix)
    ours, theirs = Shard(0, _LEASE), Shard(1, "3:worker-a")
    ours.acks = await _pending_entries(redis_client, keys, 600, 0)  # more than one XACK
    theirs.acks = await _pending_entries(redis_client, keys, 2, 1)
    await redis_client.set(keys.lease(0), _LEASE)
    await redis_client.set(keys.lease(1), "4:worker-b")  # taken over
    await redis_client.script_flush()  # a restarted server: the call gets NOSCRIPT
    through = wire(redis_client)
    acks = Acks(keys, [ours, theirs], through)
    assert len(acks.commands) == 1
    assert ours.acks == theirs.acks == []
    with capture_logs() as logs:
        await acks.check(await through.pipeline(acks.commands))
    assert [(e["event"], e["shard"]) for e in logs] == [("ack_fenced_off", 1)]
    assert await _pending(redis_client, keys, 0) == []
    assert len(await _pending(redis_client, keys, 1)) == 2  # for the shard's owner
    assert ours.acks == theirs.acks == []
