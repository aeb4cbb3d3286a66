"""Shard leases: which worker owns which shard, with fencing tokens.

Every heartbeat (a third of ``lease_ms``) a worker registers itself as live,
renews the leases it holds, gives back shards beyond its fair share
(``ceil(shards / live workers)``) and takes free shards up to it. A lease is
``SET lease "<token>:<worker>" NX PX lease_ms`` where the token comes from the
shard's ``INCR`` fencing counter (one Lua call), so every owner of a shard has a
larger token than the one before, and a write that names an old token is refused.
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Awaitable, Callable
from typing import Any, Final

import redis.asyncio as aioredis
import structlog

from actormem.runtime.errors import TransportUnavailableError
from actormem.runtime.redis import _scripts
from actormem.runtime.redis._client import eval_pipelined, redis_errors
from actormem.runtime.redis.keys import Keys

__all__ = ("LeaseManager",)

log = structlog.get_logger("actormem.redis")

#: Longest a lease may be renewed late before it is treated as lost locally.
_SAFETY: Final = 0.8


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
        self._renewed: dict[int, float] = {}
        self._acquire = client.register_script(_scripts.ACQUIRE)
        self._release = client.register_script(_scripts.RELEASE)
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

    async def heartbeat(self, *, acquire: bool = True) -> None:
        """Register as live, renew, rebalance and acquire (one round).

        Args:
            acquire: take free shards (a worker's first round only registers,
                so workers that start together see each other before sharing).

        Raises:
            TransportUnavailableError: Redis did not answer (leases held for
                longer than ``lease_ms`` since their last renewal are dropped
                locally first).
        """
        try:
            live = await self._register()
            await self._renew_all()
            share = math.ceil(self._shards / max(live, 1))
            await self._give_back(share)
            if acquire:
                await self._take(share)
        except TransportUnavailableError:
            await self._expire_unrenewed()
            raise

    async def _register(self) -> int:
        now_ms = int(time.time() * 1000)
        key = self._keys.workers()
        with redis_errors("registering the worker"):
            async with self._client.pipeline(transaction=False) as pipe:
                pipe.zadd(key, {self.worker: now_ms + self._lease_ms})
                pipe.zremrangebyscore(key, "-inf", now_ms)
                pipe.zcard(key)
                pipe.pexpire(key, self._lease_ms * 10)
                result = await pipe.execute()
        return int(result[2])

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
            await self._drop(lost, released=False)

    async def _expire_unrenewed(self) -> None:
        """Give up, locally, leases that cannot have survived without renewal."""
        limit = self._lease_ms / 1000 * _SAFETY
        now = time.monotonic()
        for shard in list(self.owned):
            if now - self._renewed.get(shard, now) > limit:
                log.warning("shard_lease_expired_unrenewed", shard=shard, worker=self.worker)
                await self._drop([shard], released=False)

    async def _give_back(self, share: int) -> None:
        extra = len(self.owned) - share
        if extra > 0:
            await self.release(sorted(self.owned, reverse=True)[:extra])

    async def _take(self, share: int) -> None:
        if len(self.owned) >= share:
            return
        for i in range(self._shards):
            shard = (self._offset + i) % self._shards
            if shard in self.owned:
                continue
            with redis_errors("acquiring a shard lease"):
                token = await self._acquire(
                    keys=[self._keys.lease(shard), self._keys.fence(shard)],
                    args=[self.worker, self._lease_ms],
                )
            if token is None:
                continue
            value = f"{int(token)}:{self.worker}"
            self.owned[shard] = value
            self._renewed[shard] = time.monotonic()
            log.info("shard_acquired", shard=shard, token=int(token), worker=self.worker)
            await self._gained(shard, value)
            if len(self.owned) >= share:
                return

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
