"""A worker's counters in Redis: what it handled, rejected, failed and dead-lettered
since it started, so that a reader outside the worker (``actormem inspect``, a
client summing its workers' failures for a report) needs no log and no scrape.

Each worker rewrites one hash, ``Keys.worker_counters`` (``am:{workers}:counters:
<worker>``), every :data:`PUBLISH_INTERVAL` seconds while it runs and once more
when it has stopped and drained; the hash expires :data:`KEEP_LEASES` leases after
its last write, so a stopped worker's final figures stay readable for a while and
then go. The workers that wrote some are listed in ``Keys.counted_workers`` (a zset
scored by when their counters expire), so a reader finds them without a SCAN. A
write is one pipeline of ``HSET``, ``PEXPIRE``, ``ZADD`` and ``ZREMRANGEBYSCORE``
(all in a worker's ACL).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Final

import anyio
import structlog

from actormem.runtime.errors import ActormemError
from actormem.runtime.redis._client import redis_errors

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from actormem.runtime._runtime import Runtime
    from actormem.runtime.redis.keys import Keys
    from actormem.runtime.redis.transport import RedisTransport

__all__ = (
    "PUBLISH_INTERVAL",
    "WorkerCounters",
    "counted_workers",
    "counters_of",
    "publish_counters",
    "read_counters",
    "read_fresh_counters",
    "read_workers_total",
    "total",
    "write_counters",
)

log = structlog.get_logger("actormem.worker")

#: Seconds between two writes of a running worker's counters (at most: a shorter
#: heartbeat interval is used when the lease is short).
PUBLISH_INTERVAL: Final = 1.0
#: Leases a worker's counters outlive its last write.
KEEP_LEASES: Final = 10


@dataclass(frozen=True)
class WorkerCounters:
    """One worker's counters since it started.

    Attributes:
        worker: its id.
        handled: messages its actors took from their mailboxes (handled or shed).
        rejected: commands answered with an expected error (bad input).
        failures: handler crashes (actor failures; bad input is not one).
        restarts: actor restarts done by supervision.
        dead_letters: stream entries it moved to the dead-letter stream.
        redelivered: stream entries delivered to it again (a failure, a dead worker).
        active: actors in its memory at the time of the write.
        active_by_kind: the same, by actor kind.
        updated_ms: when it wrote them (wall clock, ms).
        stopped: written after the worker stopped (its final figures).
    """

    worker: str
    handled: int = 0
    rejected: int = 0
    failures: int = 0
    restarts: int = 0
    dead_letters: int = 0
    redelivered: int = 0
    active: int = 0
    updated_ms: int = 0
    stopped: bool = False
    active_by_kind: dict[str, int] = field(default_factory=dict)


#: The fields kept as integers in the hash (``worker`` is its key's last part;
#: ``active_by_kind`` is kept as one field ``active:<kind>`` per kind).
_NUMBERS: Final = tuple(
    f.name for f in fields(WorkerCounters) if f.name not in ("worker", "active_by_kind")
)
_KIND: Final = "active:"


def counters_of(rt: Runtime, transport: RedisTransport, *, stopped: bool = False) -> WorkerCounters:
    """The counters of the worker ``rt`` and ``transport`` make, now.

    It walks the worker's actors once (``Runtime.stats`` makes the same walk: a few
    ms at 100,000 actors), for the active ones by kind.
    """
    dispatch, supervisor = rt._dispatch, rt._supervisor
    census = dispatch.census()
    ours = transport.stats()
    return WorkerCounters(
        worker=transport.id,
        handled=dispatch.processed,
        rejected=dispatch.rejected,
        failures=supervisor.failures,
        restarts=supervisor.restarts,
        dead_letters=ours.dead_lettered,
        redelivered=ours.redelivered,
        active=census.active,
        updated_ms=int(time.time() * 1000),
        stopped=stopped,
        active_by_kind=census.active_by_kind,
    )


async def write_counters(
    client: aioredis.Redis, keys: Keys, counters: WorkerCounters, lease_ms: int
) -> None:
    """Write ``counters`` to their worker's hash, expiring :data:`KEEP_LEASES` leases on.

    Raises:
        TransportUnavailableError: Redis did not answer.
        TransportError: Redis refused.
    """
    key, index = keys.worker_counters(counters.worker), keys.counted_workers()
    mapping = {name: int(getattr(counters, name)) for name in _NUMBERS}
    mapping.update({_KIND + kind: n for kind, n in counters.active_by_kind.items()})
    keep_ms = KEEP_LEASES * lease_ms
    now_ms = int(time.time() * 1000)
    with redis_errors("writing the worker's counters"):
        async with client.pipeline(transaction=False) as pipe:
            pipe.hset(key, mapping=mapping)  # type: ignore[arg-type]
            pipe.pexpire(key, keep_ms)
            pipe.zadd(index, {counters.worker: now_ms + keep_ms})
            pipe.zremrangebyscore(index, "-inf", now_ms)
            pipe.pexpire(index, keep_ms)
            await pipe.execute()


async def publish_counters(rt: Runtime, transport: RedisTransport) -> None:
    """Write the worker's counters every :data:`PUBLISH_INTERVAL` seconds (or every
    heartbeat, if that is shorter) until cancelled; Redis being away skips a write."""
    lease_ms = transport.config.lease_ms
    interval = min(PUBLISH_INTERVAL, lease_ms / 3000)
    while True:
        try:
            await write_counters(
                transport.client, transport.keys, counters_of(rt, transport), lease_ms
            )
        except ActormemError as exc:
            log.debug("worker_counters_unwritten", reason=str(exc))
        await anyio.sleep(interval)


async def counted_workers(client: aioredis.Redis, keys: Keys) -> list[str]:
    """The workers whose counters Redis still keeps (registered or not). Read-only.

    Raises:
        TransportUnavailableError: Redis did not answer.
        TransportError: Redis refused.
    """
    now_ms = int(time.time() * 1000)
    redis: Any = client  # redis-py's zset replies are loosely typed
    with redis_errors("listing the workers' counters"):
        # ZRANGE BYSCORE: in a worker's ACL (ZRANGEBYSCORE is not).
        found = await redis.zrange(keys.counted_workers(), now_ms, "+inf", byscore=True)
    return sorted(w.decode() for w in found)


async def read_counters(
    client: aioredis.Redis, keys: Keys, workers: Iterable[str]
) -> dict[str, WorkerCounters]:
    """The counters of ``workers`` that Redis holds (a worker without any is left out).

    Read-only.

    Raises:
        TransportUnavailableError: Redis did not answer.
        TransportError: Redis refused.
    """
    names = list(workers)
    if not names:
        return {}
    with redis_errors("reading the workers' counters"):
        async with client.pipeline(transaction=False) as pipe:
            for worker in names:
                pipe.hgetall(keys.worker_counters(worker))
            replies = await pipe.execute()
    found: dict[str, WorkerCounters] = {}
    for worker, raw in zip(names, replies, strict=True):
        if raw:
            found[worker] = _decode(worker, raw)
    return found


def _decode(worker: str, raw: dict[Any, Any]) -> WorkerCounters:
    values: dict[str, int] = {}
    kinds: dict[str, int] = {}
    for name, value in raw.items():
        key = name.decode() if isinstance(name, bytes) else str(name)
        try:
            number = int(value)
        except ValueError:
            continue  # a field someone else wrote: left out
        if key in _NUMBERS:
            values[key] = number
        elif key.startswith(_KIND):
            kinds[key[len(_KIND) :]] = number
    stopped = bool(values.pop("stopped", 0))
    return WorkerCounters(worker=worker, stopped=stopped, active_by_kind=kinds, **values)


async def read_fresh_counters(
    client: aioredis.Redis,
    keys: Keys,
    workers: Sequence[str],
    *,
    since_ms: int,
    timeout: float,
) -> dict[str, WorkerCounters]:
    """The counters of ``workers``, waiting up to ``timeout`` seconds for each to be
    written at ``since_ms`` or later (or after the worker stopped), so they count
    everything done before ``since_ms``. A worker that writes nothing in time is
    given with what it wrote last (or left out).

    Raises:
        TransportUnavailableError: Redis did not answer.
        TransportError: Redis refused.
    """
    deadline = time.monotonic() + timeout
    while True:
        found = await read_counters(client, keys, workers)
        fresh = all(
            w in found and (found[w].stopped or found[w].updated_ms >= since_ms) for w in workers
        )
        if fresh or time.monotonic() >= deadline:
            return found
        await anyio.sleep(min(0.05, max(deadline - time.monotonic(), 0)))


def total(counters: Iterable[WorkerCounters]) -> WorkerCounters:
    """The sums of several workers' counters (``worker`` names how many they were)."""
    listed = list(counters)
    sums: dict[str, Any] = {
        name: sum(int(getattr(c, name)) for c in listed)
        for name in _NUMBERS
        if name not in ("updated_ms", "stopped")
    }
    kinds: Counter[str] = Counter()
    for c in listed:
        kinds.update(c.active_by_kind)
    newest = max((c.updated_ms for c in listed), default=0)
    return WorkerCounters(
        worker=f"{len(listed)} workers", updated_ms=newest, active_by_kind=dict(kinds), **sums
    )


async def read_workers_total(transport: RedisTransport) -> WorkerCounters:
    """The counters of every worker registered on ``transport``'s deployment, summed,
    each as written after this call began (waiting up to three writes for it), so
    that they count what the workers did before it: a client's view of its workers'
    failures and restarts.

    Raises:
        TransportUnavailableError: Redis did not answer.
        TransportError: Redis refused.
    """
    since_ms = int(time.time() * 1000)
    client, keys = transport.client, transport.keys
    redis: Any = client  # redis-py's zset replies are loosely typed
    with redis_errors("reading the worker registry"):
        registered = [w.decode() for w in await redis.zrange(keys.workers(), 0, -1)]
    interval = min(PUBLISH_INTERVAL, transport.config.lease_ms / 3000)
    found = await read_fresh_counters(
        client, keys, registered, since_ms=since_ms, timeout=3 * interval
    )
    return total(found.values())
