"""The outbox: envelopes waiting to be XADDed, written in pipelined batches.

One queue per transport, so a sender's messages reach the streams in the order
they were sent; bounded, so a producer that outruns Redis (or sends while Redis
is away) waits instead of growing memory without limit.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Final

import anyio
import redis.asyncio as aioredis

from runtime.redis._client import redis_errors

__all__ = ("Outbox",)

#: Entries XADDed per pipeline.
_BATCH: Final = 64


class Outbox:
    """A bounded queue of ``(stream, data)`` and the batch writer that empties it.

    Args:
        client: returns the Redis client to write with.
        size: the most entries queued.
    """

    def __init__(self, client: Callable[[], aioredis.Redis], size: int) -> None:
        self._client = client
        self.size = size
        self._queue: deque[tuple[str, bytes]] = deque()
        self._ready = anyio.Event()
        self._space: anyio.Event | None = None
        self._drained: anyio.Event | None = None

    def __len__(self) -> int:
        return len(self._queue)

    def full(self) -> bool:
        """True when ``size`` entries are queued."""
        return len(self._queue) >= self.size

    def put_nowait(self, item: tuple[str, bytes]) -> None:
        """Queue ``item`` (the caller checked :meth:`full`)."""
        self._queue.append(item)
        self._ready.set()

    async def put(self, item: tuple[str, bytes]) -> None:
        """Queue ``item``, waiting while the outbox is full."""
        while self.full():
            if self._space is None:
                self._space = anyio.Event()
            await self._space.wait()
        self.put_nowait(item)

    async def flush(self) -> None:
        """Wait until everything queued so far is written."""
        while self._queue:
            if self._drained is None:
                self._drained = anyio.Event()
            await self._drained.wait()

    async def wait_ready(self) -> None:
        """Wait until something is queued."""
        await self._ready.wait()
        self._ready = anyio.Event()

    async def write_all(self) -> None:
        """Write batches until the queue is empty.

        Raises:
            TransportUnavailableError, TransportError: a batch failed (it stays
                queued, and is written again whole: the same bytes, the same ids).
        """
        while self._queue:
            batch = [self._queue[i] for i in range(min(len(self._queue), _BATCH))]
            with redis_errors("XADD from the outbox"):
                async with self._client().pipeline(transaction=False) as pipe:
                    for stream, data in batch:
                        pipe.xadd(stream, {b"e": data})
                    await pipe.execute()
            for _ in batch:
                self._queue.popleft()
            space, self._space = self._space, None
            if space is not None:
                space.set()
        drained, self._drained = self._drained, None
        if drained is not None:
            drained.set()
