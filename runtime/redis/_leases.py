"""Shard leases: which worker owns which shard, with fencing tokens.

Every round a worker registers itself as live, reads every shard's lease, renews
the leases it holds, gives back shards beyond its fair share and takes free
shards up to it (how many, and when the next round comes: see ``_balance``). A
lease is ``SET lease "<token>:<worker>" PX lease_ms`` where the token comes from
the shard's ``INCR`` fencing counter (one Lua call), so every owner of a shard has
a larger token than the one before, and a write that names an old token is
refused. A worker started again under the same id takes back, in its first
round, the leases its previous run left, with new tokens: its shards wait for
its restart, not for those leases to expire. A worker id started more than
twice within a lease (a crash loop) gives those leases back instead and sits out
for a lease, so the live workers take its shards.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio
import anyio.lowlevel
import redis.asyncio as aioredis
import structlog

from actormem.runtime.errors import TransportUnavailableError
from actormem.runtime.redis import _scripts
from actormem.runtime.redis._balance import Survey, holder_of
from actormem.runtime.redis._client import eval_pipelined, redis_errors
from actormem.runtime.redis.keys import Keys

__all__ = ("LeaseManager", "read_survey")

log = structlog.get_logger("actormem.redis")

#: Longest a lease may be renewed late before it is treated as lost locally.
_SAFETY: Final = 0.8
#: Starts under one worker id within a lease that take back its previous run's
#: leases; a later start within that lease gives them back and sits out a lease.
TAKE_BACK_STARTS: Final = 2


class LeaseManager:
    """Holds and renews one worker's shard leases.

    Args:
        client: the Redis client.
        keys: key names.
        worker: this worker's id.
        shards: the number of shards.
        lease_ms: a lease's time to live.
        gained: awaited with ``(shard, lease value)`` when a shard is taken.
        lost: awaited with ``(shards, released)`` when shards are lost (lease
            expired or taken by another) or given back (``released`` True). It is
            awaited *before* given-back leases are deleted, so the worker can
            finish and ack what it started first (within a third of a lease, so
            the other leases are renewed in time).

    Attributes:
        owned: the leases held, by shard.
        acquired: leases taken (or taken back) since start.
        lost: leases lost since start (expired, or taken by another worker).
    """

    def __init__(
        self,
        client: aioredis.Redis,
        keys: Keys,
        worker: str,
        shards: int,
        lease_ms: int,
        gained: Callable[[int, str], Awaitable[None]],
        lost: Callable[[list[int], bool], Awaitable[None]],
    ) -> None:
        self._client = client
        self._keys = keys
        self.worker = worker
        self._shards = shards
        self._lease_ms = lease_ms
        self._gained = gained
        self._lost = lost
        self.owned: dict[int, str] = {}
        self.acquired = 0
        self.lost = 0
        self._renewed: dict[int, float] = {}
        self._acquire = client.register_script(_scripts.ACQUIRE)
        self._release = client.register_script(_scripts.RELEASE)
        # The first round takes back what a previous run under this id left.
        self._reclaim = True
        # A worker restarting in a loop takes no shards until then (monotonic s).
        self._sit_out_until = 0.0
        # Each worker tries free shards from its own starting point, so workers
        # that start together do not all race for shard 0 first.
        self._offset = zlib.crc32(worker.encode()) % shards

    @property
    def interval(self) -> float:
        """Seconds between heartbeats."""
        return self._lease_ms / 3000

    def fresh(self, shard: int) -> bool:
        """True while ``shard``'s lease was renewed within most of its time to live."""
        renewed = self._renewed.get(shard)
        if renewed is None or shard not in self.owned:
            return False
        return time.monotonic() - renewed < self._lease_ms / 1000 * _SAFETY

    async def heartbeat(self, *, acquire: bool = True) -> float:
        """Register as live, renew, rebalance and acquire (one round).

        Args:
            acquire: take free shards (a worker's first round only registers and
                takes back its previous run's leases, so workers that start
                together see each other before sharing).

        Returns:
            Seconds until the next round (a heartbeat's interval, or less for a
            worker below its share that expects a shard to free up sooner). A
            worker restarting in a loop sits out: its rounds do nothing for a lease.

        Raises:
            TransportUnavailableError: Redis did not answer (leases held for
                longer than ``lease_ms`` since their last renewal are dropped
                locally first).
        """
        idle = self._sit_out_until - time.monotonic()
        if idle > 0:
            return min(idle, self.interval)
        try:
            survey = await self._survey()
            if self._reclaim:
                await self._take_back(survey)
                if self._sit_out_until:
                    return self.interval
            await self._renew_all()
            await self._give_back(survey)
            if acquire:
                await self._take(survey)
        except TransportUnavailableError:
            await self._expire_unrenewed()
            raise
        return survey.next_round(self.worker, len(self.owned))

    async def _survey(self) -> Survey:
        """Register, and read the registry and every shard's lease."""
        now_ms = int(time.time() * 1000)
        key = self._keys.workers()
        with redis_errors("registering the worker"):
            async with self._client.pipeline(transaction=False) as pipe:
                pipe.zadd(key, {self.worker: now_ms + self._lease_ms})
                pipe.zremrangebyscore(key, "-inf", now_ms)
                pipe.zrange(key, 0, -1, withscores=True)
                pipe.pexpire(key, self._lease_ms * 10)
                result = await pipe.execute()
        leases, _ = await _read_leases(self._client, self._keys, self._shards, ttls=False)
        return Survey(
            now_ms=now_ms,
            lease_ms=self._lease_ms,
            registered={w.decode(): int(score) for w, score in result[2]},
            leases=leases,
            shards=self._shards,
        )

    async def _take_back(self, survey: Survey) -> None:
        """Take back, with new tokens, the leases a previous run under this id left.

        Unless this id keeps restarting: a crash loop must not hold its shards, so
        its third start within a lease gives those leases back instead, leaves the
        registry and sits out for a lease (taking no shards), and the live workers
        take its shards in their next round.
        """
        key = self._keys.worker_starts(self.worker)
        client: Any = self._client
        with redis_errors("counting the worker's starts"):
            # INCR itself: redis-py's incr() sends INCRBY, which a worker's ACL denies.
            starts = int(await client.execute_command("INCR", key))
            if starts == 1:
                await self._client.pexpire(key, self._lease_ms)
        self._reclaim = False
        left = {s: v for s, v in survey.leases.items() if holder_of(v) == self.worker}
        if starts <= TAKE_BACK_STARTS:
            for shard, value in sorted(left.items()):
                if shard not in self.owned:
                    await self._lease(shard, previous=value)
            return
        log.warning("worker_restarting_in_a_loop", worker=self.worker, starts=starts)
        self._sit_out_until = time.monotonic() + self._lease_ms / 1000
        with redis_errors("giving back the previous run's leases"):
            for shard, value in left.items():
                await self._release(keys=[self._keys.lease(shard)], args=[value])
            await self._client.zrem(self._keys.workers(), self.worker)

    async def _renew_all(self) -> None:
        """Renew every held lease in one round trip (a pipeline): under load a round
        trip waits for a busy event loop, and one per shard could add up to a lease."""
        owned = list(self.owned.items())
        if not owned:
            return
        # The time of sending, not of the answer: the lease cannot outlive that by more.
        sent = time.monotonic()
        calls: list[tuple[list[Any], list[Any]]] = [
            ([self._keys.lease(shard)], [value, self._lease_ms]) for shard, value in owned
        ]
        with redis_errors("renewing the shard leases"):
            results = await eval_pipelined(self._client, _scripts.RENEW, calls)
        lost = []
        for (shard, _value), ok in zip(owned, results, strict=True):
            if ok:
                self._renewed[shard] = sent
            else:
                log.warning("shard_lease_lost", shard=shard, worker=self.worker)
                lost.append(shard)
        if lost:
            self.lost += len(lost)
            await self._drop(lost, released=False)

    async def _expire_unrenewed(self) -> None:
        """Give up, locally, leases that cannot have survived without renewal."""
        limit = self._lease_ms / 1000 * _SAFETY
        now = time.monotonic()
        for shard in list(self.owned):
            if now - self._renewed.get(shard, now) > limit:
                log.warning("shard_lease_expired_unrenewed", shard=shard, worker=self.worker)
                self.lost += 1
                await self._drop([shard], released=False)

    async def _give_back(self, survey: Survey) -> None:
        extra = survey.surplus(len(self.owned))
        if extra > 0:
            await self.release(sorted(self.owned, reverse=True)[:extra])

    async def _take(self, survey: Survey) -> None:
        share = survey.share()
        free = set(survey.free())
        for i in range(self._shards):
            if len(self.owned) >= share:
                return
            shard = (self._offset + i) % self._shards
            if shard in free and shard not in self.owned:
                await self._lease(shard)

    async def _lease(self, shard: int, *, previous: str | None = None) -> None:
        """Take ``shard``'s lease if it is free (or still holds ``previous``)."""
        args: list[str | int] = [self.worker, self._lease_ms]
        if previous is not None:
            args.append(previous)
        await anyio.lowlevel.checkpoint_if_cancelled()
        # Shielded (the client's socket timeout bounds it): a lease Redis gave must be
        # known here, so that closing gives it back; a round cancelled after sending
        # the command but before reading its reply would leave it held until it expires.
        with redis_errors("acquiring a shard lease"), anyio.CancelScope(shield=True):
            token = await self._acquire(
                keys=[self._keys.lease(shard), self._keys.fence(shard)], args=args
            )
        if token is None:
            return
        value = f"{int(token)}:{self.worker}"
        self.owned[shard] = value
        self.acquired += 1
        self._renewed[shard] = time.monotonic()
        event = "shard_acquired" if previous is None else "shard_taken_back"
        log.info(event, shard=shard, token=int(token), worker=self.worker)
        await self._gained(shard, value)

    async def release(self, shards: list[int]) -> None:
        """Stop using ``shards`` and give their leases back (those still ours)."""
        values = {s: self.owned[s] for s in shards if s in self.owned}
        if not values:
            return
        await self._drop(list(values), released=True)
        for shard, value in values.items():
            with redis_errors("releasing a shard lease"):
                await self._release(keys=[self._keys.lease(shard)], args=[value])
            log.info("shard_released", shard=shard, worker=self.worker)

    async def release_all(self) -> None:
        """Give every lease back and leave the live-worker registry."""
        await self.release(list(self.owned))
        with redis_errors("unregistering the worker"):
            await self._client.zrem(self._keys.workers(), self.worker)

    async def _drop(self, shards: list[int], *, released: bool) -> None:
        for shard in shards:
            self.owned.pop(shard, None)
            self._renewed.pop(shard, None)
        await self._lost(shards, released)


async def read_survey(client: aioredis.Redis, keys: Keys, shards: int, lease_ms: int) -> Survey:
    """Read the worker registry and every shard's lease, with the time each lease has
    left (``Survey.expires_in_ms``), without registering: read-only.

    Args:
        client: a client of the deployment's Redis.
        keys: its key names.
        shards: its number of shards.
        lease_ms: its leases' time to live.

    Raises:
        TransportUnavailableError: Redis did not answer.
        TransportError: Redis refused.
    """
    now_ms = int(time.time() * 1000)
    redis: Any = client  # redis-py's zset replies are loosely typed
    with redis_errors("reading the worker registry"):
        registered = await redis.zrange(keys.workers(), 0, -1, withscores=True)
    leases, left = await _read_leases(client, keys, shards, ttls=True)
    return Survey(
        now_ms=now_ms,
        lease_ms=lease_ms,
        registered={w.decode(): int(score) for w, score in registered},
        leases=leases,
        shards=shards,
        expires_in_ms=left,
    )


async def _read_leases(
    client: aioredis.Redis, keys: Keys, shards: int, *, ttls: bool
) -> tuple[dict[int, str], dict[int, int]]:
    """Every shard's lease value (shards with none left out) and, with ``ttls``, the
    milliseconds each has left, in one round trip."""
    with redis_errors("reading the shard leases"):
        async with client.pipeline(transaction=False) as pipe:
            for shard in range(shards):
                pipe.get(keys.lease(shard))
                if ttls:
                    pipe.pttl(keys.lease(shard))
            values = await pipe.execute()
    step = 2 if ttls else 1
    leases = {s: v.decode() for s, v in enumerate(values[::step]) if v is not None}
    left: dict[int, int] = {}
    if ttls:
        left = {s: int(t) for s, t in enumerate(values[1::2]) if s in leases and int(t) >= 0}
    return leases, left
