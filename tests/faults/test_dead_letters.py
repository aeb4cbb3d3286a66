"""Bad frames on a running worker's shard streams: every one dead-lettered with its reason.

Garbage is XADDed straight to the shard streams of a live worker (as a buggy or
hostile producer would); afterwards the dead-letter stream must hold each bad
entry, with the reason the codec gives for it here, and the worker must still
serve its agents with nothing lost (the history checker).
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
import redis.asyncio as aioredis

from actormem.actors import AppConfig, MemoryRuntime, Message
from actormem.actors.errors import MemoryInputError
from actormem.actors.memory.commands import Get
from actormem.runtime._envelope import Envelope
from actormem.runtime.errors import MessageDecodeError
from actormem.runtime.redis import Keys, RedisConfig, _scripts, default_codec, shard_of
from actormem.runtime.redis.transport import RedisTransport
from tests.faults.frames import deep, mutants, real_frames
from tests.support.history import History, observe_memory
from tests.support.streams import eventually

pytestmark = [pytest.mark.faults, pytest.mark.anyio]

#: The largest envelope the worker takes in these tests.
MAX_BYTES = 4096


@pytest.fixture
def config(redis_config: RedisConfig) -> RedisConfig:
    return redis_config.replace(max_message_bytes=MAX_BYTES)


@pytest.fixture
async def rt(config: RedisConfig, redis_client: aioredis.Redis) -> AsyncIterator[MemoryRuntime]:
    """A worker that owns every shard (so every bad entry reaches it)."""
    transport = RedisTransport(config.url, config)
    async with MemoryRuntime(AppConfig(), transport=transport) as runtime:

        async def owns_all() -> bool:
            return transport.owned_shards() == list(range(config.shards))

        await eventually(owns_all, "the worker owns every shard")
        yield runtime


def garbage(keys: Keys, count: int) -> list[tuple[dict[bytes, bytes], str]]:
    """Bad entries, each with (part of) the reason it must be dead-lettered with."""
    bad: list[tuple[dict[bytes, bytes], str]] = []
    frames = real_frames(reply_to=keys.replies("fuzzer"))
    for n, frame in enumerate(frames[name] for name in sorted(frames) if "envelope" in name):
        for data in mutants(frame, 400, seed=100 + n, max_depth=50):
            if len(bad) >= count * (n + 1) // 7 or len(data) > MAX_BYTES:
                break
            try:
                default_codec.decode_envelope(data)
            except MessageDecodeError as exc:
                if default_codec.refusal(data) and default_codec.reply_address(data):
                    continue  # a well-formed ask with bad input: answered (see refused_asks)
                bad.append(({b"e": data}, str(exc)))
            except Exception:  # the codec's known defects: see test_decoders
                continue
    oversized = default_codec.encode_envelope(
        Envelope(recipient="memory/alice", body=Get(names=["x" * MAX_BYTES]), id="big")
    )
    bad.append(({b"e": oversized}, f"over max_message_bytes={MAX_BYTES}"))
    bad.append(({b"x": b"no envelope here"}, "the entry has no 'e' field"))
    bad.append(({b"e": b""}, "not a valid envelope"))
    return bad


def refused_asks(keys: Keys) -> list[bytes]:
    """Well-formed asks whose body fails validation: answered and acked, never dead letters."""
    frames = real_frames(reply_to=keys.replies("fuzzer"))
    found = []
    for n, frame in enumerate(frames[name] for name in sorted(frames) if "envelope" in name):
        for data in mutants(frame, 400, seed=100 + n, max_depth=50):
            refused = len(data) <= MAX_BYTES and default_codec.refusal(data)
            if refused and default_codec.reply_address(data):
                found.append(data)
    return found


def invalid_utf8(fields: dict[str, Any]) -> bytes:
    """``fields`` as msgpack, with the text ``\xff`` turned into bytes that are not UTF-8."""
    return msgspec.msgpack.encode(fields).replace(b"\xc3\xbf", b"\xff\xfe")


async def dead_letters(
    client: aioredis.Redis, keys: Keys
) -> dict[tuple[str, str], dict[bytes, bytes]]:
    """The dead letters by the stream and entry id they had (ids repeat across streams)."""
    letters = await client.xrange(keys.dead_letters())
    return {(f[b"stream"].decode(), f[b"entry"].decode()): f for _, f in letters}


async def serves_without_loss(rt: MemoryRuntime) -> None:
    """The worker still serves: a few adds to a new agent, checked with the history checker."""
    history = History()
    agent = f"survivor-{secrets.token_hex(4)}"
    for n in range(5):
        message = Message(role="user", content=f"still here {n}")
        await rt.memory(agent).add(history.message(agent, message))
    verdict = history.check(await observe_memory(rt, [agent]))
    assert verdict.ok, str(verdict)


async def test_every_bad_frame_is_dead_lettered_with_its_reason(
    rt: MemoryRuntime, config: RedisConfig, redis_client: aioredis.Redis
) -> None:
    keys = Keys(config.prefix)
    bad = garbage(keys, 60)
    assert len(bad) > 50
    expected = {}
    for n, (fields, reason) in enumerate(bad):
        stream = keys.stream(n % config.shards)
        entry = (await redis_client.xadd(stream, fields)).decode()
        expected[stream, entry] = reason
    assert len(expected) == len(bad)
    refused = set()
    for n, data in enumerate(refused_asks(keys)):
        stream = keys.stream(n % config.shards)
        refused.add((stream, (await redis_client.xadd(stream, {b"e": data})).decode()))
    assert refused

    async def all_dead() -> bool:
        return expected.keys() <= (await dead_letters(redis_client, keys)).keys()

    await eventually(all_dead, "every bad entry reaches the dead letters")
    letters = await dead_letters(redis_client, keys)
    assert not refused & letters.keys()
    for (stream, entry), reason in expected.items():
        letter = letters[stream, entry]
        assert reason in letter[b"reason"].decode(), (entry, reason, letter[b"reason"])

    # Each was acked, the refused asks too: nothing is left pending to be delivered again.
    async def all_acked() -> bool:
        for shard in range(config.shards):
            stream = keys.stream(shard)
            if (await redis_client.xpending(stream, "workers"))["pending"]:
                return False
            (group,) = await redis_client.xinfo_groups(stream)
            last = tuple(map(int, group["last-delivered-id"].decode().split("-")))
            newest = [e for s, e in refused if s == stream]
            if newest and last < max(tuple(map(int, e.split("-"))) for e in newest):
                return False  # not read yet
        return True

    await eventually(all_acked, "every entry is read and acked")
    assert not refused & (await dead_letters(redis_client, keys)).keys()
    await serves_without_loss(rt)


async def test_an_oversized_message_is_refused_at_the_producer(
    rt: MemoryRuntime, config: RedisConfig, redis_client: aioredis.Redis
) -> None:
    with pytest.raises(MemoryInputError, match=f"max_message_bytes={MAX_BYTES}"):
        await rt.memory("alice").add({"role": "user", "content": "x" * MAX_BYTES})
    stream = Keys(config.prefix).stream(shard_of("memory/alice", config.shards))
    assert await redis_client.xlen(stream) == 0
    assert await rt.memory("alice").get(scope="history") == []


@pytest.mark.parametrize(
    "frame",
    [
        invalid_utf8({"recipient": "memory/\xff", "body": None}),
        deep(3_000),
    ],
    ids=["invalid-utf8", "deep-nesting"],
)
async def test_a_poison_frame_is_dead_lettered_and_the_worker_goes_on(
    frame: bytes, config: RedisConfig, redis_client: aioredis.Redis
) -> None:
    keys = Keys(config.prefix)
    transport = RedisTransport(config.url, config)
    async with MemoryRuntime(AppConfig(), transport=transport) as runtime:
        await runtime.memory("alice").add({"role": "user", "content": "before"})
        entry = (await redis_client.xadd(keys.stream(0), {b"e": frame})).decode()

        async def dead() -> bool:
            return (keys.stream(0), entry) in await dead_letters(redis_client, keys)

        await eventually(dead, "the poison frame is dead-lettered", limit=10)
        await serves_without_loss(runtime)


@pytest.mark.parametrize("where", ["broadcast", "replies"])
async def test_a_poison_broadcast_or_reply_is_dropped_and_everyone_goes_on(
    where: str, config: RedisConfig, redis_client: aioredis.Redis
) -> None:
    # Every worker reads the broadcast stream; each client reads its reply stream.
    keys = Keys(config.prefix)
    app = AppConfig()
    async with (
        MemoryRuntime(app, transport=RedisTransport(config.url, config)),
        MemoryRuntime(app, transport=RedisTransport(config.url, config, worker=False)) as client,
    ):
        await client.memory("alice").add({"role": "user", "content": "before"})
        if where == "broadcast":
            poison = invalid_utf8({"recipient": "memory/*", "id": "\xff", "body": None})
            await redis_client.xadd(keys.broadcast(), {b"e": poison})
        else:
            replies = keys.replies(client.transport.id)  # type: ignore[attr-defined]
            poison = invalid_utf8({"correlation": 1, "error_type": "\xff"})
            await redis_client.xadd(replies, {b"r": poison})
        for _ in range(3):  # past the poison's turn on every reader
            await serves_without_loss(client)


async def test_an_ask_cannot_make_the_worker_touch_keys_outside_the_reply_streams(
    rt: MemoryRuntime, config: RedisConfig, redis_client: aioredis.Redis
) -> None:
    keys = Keys(config.prefix)
    victim = "memory/victim"
    shard = shard_of(victim, config.shards)
    await rt.memory("victim").add({"role": "user", "content": "my only copy"})
    log = keys.actor_log(shard, victim)
    assert await redis_client.pttl(log) == -1  # stored for good
    # An ask whose reply_to names the victim's history instead of a reply stream.
    envelope: Any = Envelope(
        recipient=victim, body=Get(), id="hostile-1", reply_to=log, correlation=1
    )
    await redis_client.xadd(keys.stream(shard), {b"e": default_codec.encode_envelope(envelope)})

    async def handled() -> bool:
        return (await redis_client.xpending(keys.stream(shard), "workers"))["pending"] == 0

    await eventually(handled, "the hostile ask is handled")
    await rt.memory("victim").get()  # and everything before it
    assert await redis_client.type(log) == b"list"
    assert await redis_client.pttl(log) == -1, "the victim's history now expires"


async def test_a_dead_letter_written_before_its_worker_died_is_not_written_twice(
    config: RedisConfig, redis_client: aioredis.Redis
) -> None:
    keys = Keys(config.prefix)
    stream = keys.stream(0)
    entry = (await redis_client.xadd(stream, {b"e": b"not msgpack"})).decode()
    # A worker wrote the dead letter, then died before its ack: the entry is still
    # there to be read, and the dead-letter stream already holds it.
    dying = redis_client.register_script(_scripts.DEAD_LETTER)
    letter = [b"reason", b"first", b"stream", stream, b"entry", entry, b"worker", b"dead"]
    written = await dying(
        keys=[keys.dead_letters(), keys.dead_letter_index()],
        args=[f"{stream} {entry}", 1000, "1.0", *letter],
    )
    assert written == 1
    transport = RedisTransport(config.url, config)
    async with MemoryRuntime(AppConfig(), transport=transport):

        async def acked() -> bool:
            groups = await redis_client.xinfo_groups(stream)
            return bool(groups) and groups[0]["pending"] == 0 and groups[0]["lag"] == 0

        await eventually(acked, "the next worker dead-letters the entry and acks it")
        assert transport.stats().dead_lettered == 0
    letters = await redis_client.xrange(keys.dead_letters())
    assert [fields[b"worker"] for _, fields in letters] == [b"dead"]
