"""What the Redis benchmarks share: a private server, the app config over it,
worker processes, and the raw redis-py baseline.

Every Redis benchmark starts its own ``redis-server`` (:class:`EmbeddedRedis`, on a
Unix socket in a temp dir, stopped on exit): it never touches a server it did not
start, and the raw baseline runs on the same server as actormem, in the same run.
"""

from __future__ import annotations

import argparse
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import msgspec

from actormem.actors import AppConfig, Message
from actormem.actors.app.wiring import MemoryRuntime, worker_env
from actormem.actors.config import MemoryConfig
from actormem.actors.memory.commands import Add
from actormem.actors.memory.exchange import counted_add
from actormem.benchmarks._common import at_least, bench_config
from actormem.runtime import Envelope, RuntimeConfig
from actormem.runtime.redis import EmbeddedRedis, RedisConfig, connect, default_codec
from actormem.runtime.redis.trace import Tracer, attach
from actormem.runtime.redis.transport import RedisTransport
from actormem.runtime.redis.worker import WorkerProcesses, worker_limit
from actormem.runtime.tokens import get_counter

__all__ = (
    "REGISTER",
    "agent_keys_memory",
    "client_runtime",
    "floor_redis",
    "raw_redis",
    "redis_app_config",
    "redis_info_memory",
    "sender_adds",
    "server",
    "stream_backlog",
    "streams_memory",
    "wait_all_shards_owned",
    "wait_drained",
    "wire_payload",
    "worker_count",
    "worker_runtime",
    "workers",
)

#: What worker processes register: the app's actor kinds.
REGISTER = "actormem.actors.app.wiring:worker_register"
#: Entries per XADD pipeline and per XREADGROUP in the raw baseline.
RAW_BATCH = 1_000


def worker_count(minimum: int) -> Callable[[str], int]:
    """An argparse type: a number of worker processes, >= ``minimum`` and within
    :func:`~actormem.runtime.redis.worker.worker_limit` (checked before a run
    starts, not when its workers do)."""
    at_least_minimum = at_least(minimum)

    def convert(text: str) -> int:
        count: int = at_least_minimum(text)
        most = worker_limit()
        if count > most:
            raise argparse.ArgumentTypeError(
                f"{count} worker processes is over this machine's limit of {most}"
            )
        return count

    convert.__name__ = "int"  # "invalid int value: ..."
    return convert


@asynccontextmanager
async def server() -> AsyncIterator[EmbeddedRedis]:
    """A private ``redis-server`` for one benchmark run."""
    async with EmbeddedRedis() as redis:
        yield redis


def redis_app_config(
    url: str,
    *,
    shards: int = 16,
    mailbox_size: int = 10_000,
    passivate_after: float | None = None,
    shed: bool = True,
) -> AppConfig:
    """The benchmark app config (compression off) over the Redis at ``url``.

    Each call gets a fresh key prefix, so runs on one server never see each
    other's streams or state.
    """
    base = bench_config(mailbox_size=mailbox_size, shed=shed)
    redis = RedisConfig(url=url, prefix=f"b{secrets.token_hex(4)}", shards=shards)
    if passivate_after is not None:
        redis = redis.replace(passivate_after=passivate_after)
    runtime = msgspec.structs.replace(base.runtime, transport="redis")
    config: AppConfig = msgspec.structs.replace(base, runtime=runtime, redis=redis)
    return config


@asynccontextmanager
async def worker_runtime(config: AppConfig) -> AsyncIterator[MemoryRuntime]:
    """A :class:`MemoryRuntime` that is itself the worker, once it owns every shard."""
    transport = RedisTransport(config.redis.url, config.redis, worker=True)
    async with MemoryRuntime(config, transport=transport) as rt:
        with anyio.fail_after(30):
            while len(transport.owned_shards()) < config.redis.shards:  # noqa: ASYNC110
                await anyio.sleep(0.02)
        yield rt


@asynccontextmanager
async def client_runtime(
    config: AppConfig, trace: Tracer | None = None
) -> AsyncIterator[tuple[MemoryRuntime, Any]]:
    """A client-only runtime (it sends and asks; worker processes host the actors),
    its asks' stages recorded to ``trace`` if given."""
    transport = RedisTransport(config.redis.url, config.redis, worker=False)
    if trace is not None:
        attach(transport, trace)
    async with MemoryRuntime(config, transport=transport) as rt:
        yield rt, transport


@asynccontextmanager
async def workers(
    config: AppConfig, count: int, env: dict[str, str] | None = None
) -> AsyncIterator[WorkerProcesses]:
    """``count`` worker processes on ``config``'s Redis, running ``config`` (compression
    off like the rest of the benchmark), once they own every shard; ``env``: more
    environment variables for them."""
    async with WorkerProcesses(
        count,
        config.redis,
        REGISTER,
        runtime=RuntimeConfig(
            mailbox_size=config.runtime.mailbox_size,
            shed_expired_asks=config.runtime.shed_expired_asks,
        ),
        env={**worker_env(config), **(env or {})},
        log_level="warning",
    ) as procs:
        await wait_all_shards_owned(config)
        yield procs


async def wait_all_shards_owned(config: AppConfig, timeout: float = 60.0) -> None:
    """Wait until every shard has a lease (the workers share them out)."""
    from actormem.runtime.redis import Keys

    keys = Keys(config.redis.prefix)
    client = connect(config.redis)
    try:
        with anyio.fail_after(timeout):
            while True:
                owned = await client.exists(*(keys.lease(s) for s in range(config.redis.shards)))
                if owned == config.redis.shards:
                    return
                await anyio.sleep(0.05)
    finally:
        await client.aclose()


async def redis_info_memory(url: str) -> int:
    """``used_memory`` of the Redis at ``url``, in bytes."""
    client = connect(RedisConfig(url=url))
    try:
        info = await client.info("memory")
        return int(info["used_memory"])
    finally:
        await client.aclose()


async def agent_keys_memory(url: str, prefix: str) -> tuple[int, int, dict[str, int]]:
    """``MEMORY USAGE`` summed over every agent key under ``prefix`` (history,
    snapshot, applied ids), how many keys there are, and the bytes by the kind of
    key (the last part of its name)."""
    client = connect(RedisConfig(url=url))
    try:
        total = count = 0
        by_kind: dict[str, int] = {}
        batch: list[bytes] = []

        async def measure() -> None:
            nonlocal total, count
            async with client.pipeline(transaction=False) as pipe:
                for key in batch:
                    pipe.memory_usage(key, samples=0)
                sizes = await pipe.execute()
            for key, size in zip(batch, sizes, strict=True):
                # The last part of the name; a kept reply's is its command id.
                kind = "reply" if b":reply:" in key else key.rsplit(b":", 1)[-1].decode()
                by_kind[kind] = by_kind.get(kind, 0) + int(size or 0)
                total += int(size or 0)
            count += len(batch)
            batch.clear()

        async for key in client.scan_iter(match=f"{prefix}:*:agent:*", count=1_000):
            batch.append(key)
            if len(batch) >= 1_000:
                await measure()
        await measure()
        return total, count, by_kind
    finally:
        await client.aclose()


async def streams_memory(url: str, prefix: str, shards: int) -> int:
    """``MEMORY USAGE`` summed over the ``shards`` shard streams under ``prefix``."""
    from actormem.runtime.redis import Keys

    keys = Keys(prefix)
    client = connect(RedisConfig(url=url))
    try:
        async with client.pipeline(transaction=False) as pipe:
            for key in (keys.stream(s) for s in range(shards)):
                pipe.memory_usage(key, samples=0)
            return sum(int(size or 0) for size in await pipe.execute())
    finally:
        await client.aclose()


def sender_adds(texts: list[str]) -> list[Add]:
    """One ``add`` of a user message per text, as a client's handle makes it: each
    message's tokens counted where it is made (in the default encoding)."""
    config = MemoryConfig()
    return [counted_add("add", Message(role="user", content=t), config) for t in texts]


def wire_payload(text: str) -> bytes:
    """The bytes actormem puts on a stream for one ``add`` of ``text`` (counted by
    the sender): the raw baseline moves entries of the same size."""
    (add,) = sender_adds([text])
    envelope = Envelope(recipient="memory/agent0", body=add, id="0" * 26)
    return default_codec.encode_envelope(envelope)


async def _end_to_end(
    url: str,
    name: str,
    total: int,
    entries: Callable[[int, int], Iterable[bytes]],
    handle: Callable[[Any, str, list[Any]], Awaitable[None]],
    batch: int,
) -> float:
    """Entries/s through one stream: one producer XADDs ``entries(lo, hi)`` in
    pipelines of ``batch``, one consumer XREADGROUPs ``batch`` at a time and hands each
    read to ``handle(client, stream, entries)``, concurrently; the clock stops when the
    last entry is handled. The stream and the keys named after it are deleted after."""
    client: Any = connect(RedisConfig(url=url))
    stream = f"{name}:{secrets.token_hex(4)}"
    try:
        await client.xgroup_create(stream, "g", id="0", mkstream=True)
        started = time.perf_counter()

        async def produce() -> None:
            for lo in range(0, total, batch):
                async with client.pipeline(transaction=False) as pipe:
                    for data in entries(lo, min(lo + batch, total)):
                        pipe.xadd(stream, {b"e": data})
                    await pipe.execute()

        async def consume() -> None:
            handled = 0
            while handled < total:
                response = await client.xreadgroup("g", "c", {stream: ">"}, count=batch, block=100)
                for _stream, read in response or ():
                    await handle(client, stream, read)
                    handled += len(read)

        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            tg.start_soon(produce)
        return total / (time.perf_counter() - started)
    finally:
        keys = [key async for key in client.scan_iter(match=f"{stream}*", count=1_000)]
        for lo in range(0, len(keys), 1_000):
            await client.delete(*keys[lo : lo + 1_000])
        await client.aclose()


async def raw_redis(url: str, payloads: list[bytes], batch: int = RAW_BATCH) -> float:
    """Entries/s end to end with plain redis-py: pipelined XADD by one producer,
    XREADGROUP COUNT ``batch`` -> XACK by one consumer, concurrently, on one stream.

    The clock stops when the consumer has acked the last entry.
    """

    async def ack(client: Any, stream: str, read: list[Any]) -> None:
        await client.xack(stream, "g", *(entry for entry, _ in read))

    return await _end_to_end(
        url, "rawbench", len(payloads), lambda lo, hi: payloads[lo:hi], ack, batch
    )


#: The floor's store: XACK a batch's entries and RPUSH each agent's messages, one call.
#: ARGV: group, number of entries, the entries, then per agent: its key, its number of
#: items, the items.
_FLOOR_STORE = """
local n = tonumber(ARGV[2])
redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, 3, 2 + n))
local i = 3 + n
while i <= #ARGV do
  local count = tonumber(ARGV[i + 1])
  redis.call('RPUSH', ARGV[i], unpack(ARGV, i + 2, i + 1 + count))
  i = i + 2 + count
end
return n
"""


async def floor_redis(url: str, adds: list[Add], agents: int, batch: int = RAW_BATCH) -> float:
    """Adds/s end to end with the least work that has the same effect as actormem's,
    and no runtime: the producer encodes each ``add`` envelope (msgspec) and XADDs
    them pipelined as the raw baseline does; the consumer reads a batch, decodes each
    entry, takes its message's token count (made by the sender, see
    :func:`sender_adds`) or counts it exactly when it carries none, encodes the
    message for its agent's history, and stores the batch and acks its entries with
    one script call.

    What it leaves out is what the runtime adds to that: mailboxes and actors,
    duplicate detection, leases and fencing, replies, snapshots, retries.
    """
    from actormem.actors.messages import count_tokens, encode_message
    from actormem.runtime.redis import eval_pipelined

    counter = get_counter()
    envelopes = [
        Envelope(recipient=f"memory/agent{i % agents}", body=add, id=f"{i:026d}")
        for i, add in enumerate(adds)
    ]

    def encoded(lo: int, hi: int) -> Iterable[bytes]:
        return (default_codec.encode_envelope(env) for env in envelopes[lo:hi])

    async def store(client: Any, stream: str, read: list[Any]) -> None:
        logs: dict[str, list[bytes]] = {}
        for _entry, fields in read:
            env = default_codec.decode_envelope(fields[b"e"])
            key = f"{stream}:log:{env.recipient}"
            for message in env.body.messages:
                if message.tokens < 0 or env.body.encoding != counter.encoding:
                    message = message.with_tokens(count_tokens(message, counter))
                logs.setdefault(key, []).append(encode_message(message))
        args: list[Any] = ["g", len(read), *(entry for entry, _ in read)]
        for key, items in logs.items():
            args += (key, len(items), *items)
        await eval_pipelined(client, _FLOOR_STORE, [([stream], args)])

    return await _end_to_end(url, "floorbench", len(envelopes), encoded, store, batch)


async def stream_backlog(client: Any, config: AppConfig) -> tuple[int, int]:
    """``(waiting, pending)`` over every shard stream: entries not yet read by the
    workers' consumer group (its lag) and entries read but not yet acked."""
    from actormem.runtime.redis import CONSUMER_GROUP, Keys

    keys = Keys(config.redis.prefix)
    waiting = pending = 0
    async with client.pipeline(transaction=False) as pipe:
        for shard in range(config.redis.shards):
            pipe.xinfo_groups(keys.stream(shard))
        answers = await pipe.execute(raise_on_error=False)
    for groups in answers:
        if isinstance(groups, Exception):  # no stream yet: nothing sent to the shard
            continue
        for group in groups:
            name = group["name"]
            if (name.decode() if isinstance(name, bytes) else name) != CONSUMER_GROUP:
                continue
            waiting += int(group.get("lag") or 0)
            pending += int(group["pending"])
    return waiting, pending


async def wait_drained(client: Any, config: AppConfig, timeout: float) -> None:
    """Wait until every shard stream is read and acked (the workers handled it all).

    Raises:
        TimeoutError: still not drained after ``timeout`` seconds.
    """
    with anyio.fail_after(timeout):
        while True:
            waiting, pending = await stream_backlog(client, config)
            if waiting == 0 and pending == 0:
                return
            await anyio.sleep(0.005)


async def redelivered_pending(client: Any, config: AppConfig, page: int = 1_000) -> int:
    """Entries pending in the shard streams that were delivered more than once
    (XPENDING: a worker died, stalled or failed on them); the first ``page`` per shard."""
    from actormem.runtime.redis import CONSUMER_GROUP, Keys

    keys = Keys(config.redis.prefix)
    count = 0
    for shard in range(config.redis.shards):
        try:
            entries = await client.xpending_range(
                keys.stream(shard), CONSUMER_GROUP, min="-", max="+", count=page
            )
        except Exception:
            continue
        count += sum(1 for e in entries if e["times_delivered"] > 1)
    return count
