"""The outbox: envelopes waiting to be XADDed, written in pipelined batches.

One queue per transport, so a sender's messages reach the streams in the order
they were sent; bounded, so a producer that outruns Redis (or sends while Redis
is away) waits instead of growing memory without limit. Streams are bounded
too: the outbox writes to a shard stream only while it holds fewer than
``stream_limit`` entries (its workers are down or behind once it is that long),
whatever the other streams in the same batch do; otherwise it stops writing, so
producers wait (backpressure) instead of filling Redis's memory.

Each entry carries a deadline: an ask's (or its reply's) wall-clock deadline, or
infinity. An entry whose deadline passed while it was queued is dropped unsent:
its asker has already given up, and past capacity the outbox would otherwise
spend its writes on asks that time out while fresh ones wait behind them.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Final, Protocol

import anyio
import redis.asyncio as aioredis
import structlog

from actormem.runtime.redis import _scripts
from actormem.runtime.redis._client import eval_pipelined, redis_errors
from actormem.runtime.redis._wire import wire

__all__ = ("NO_DEADLINE", "Outbox", "Riders")

#: The deadline of an entry that never expires (a tell).
NO_DEADLINE: Final = math.inf

log = structlog.get_logger("actormem.redis")

#: Entries XADDed per pipeline, at most.
_BATCH: Final = 4_096
#: Bytes of entries per script call, at most (one entry may exceed it alone): Redis
#: holds a whole command in its query buffer before running it (1 GB by default).
_CALL_BYTES: Final = 64 << 20
#: Longest pause while a stream is over its limit (s).
_MAX_FULL_PAUSE: Final = 1.0


class Riders(Protocol):
    """Commands that go after a batch's XADDs, in its pipeline (see :attr:`Outbox.riders`)."""

    commands: list[tuple[Any, ...]]

    def give_back(self) -> None:
        """The write failed (the commands may or may not have run)."""

    async def check(self, replies: list[Any]) -> None:
        """The write went: ``replies`` are the server's replies to :attr:`commands`."""


class Outbox:
    """A bounded queue of ``(stream, data, deadline)`` and the batch writer that empties it.

    Args:
        client: returns the Redis client to write with.
        size: the most entries queued.
        stream_limit: the longest a stream may grow before writing pauses.
        field: the entry field the data goes in.
        maxlen: trim each stream to about this many entries (None: never).
        expire_ms: give each stream written this time to live (None: none).
    """

    def __init__(
        self,
        client: Callable[[], aioredis.Redis],
        size: int,
        stream_limit: int,
        *,
        field: bytes = b"e",
        maxlen: int | None = None,
        expire_ms: int | None = None,
    ) -> None:
        self._client = client
        self.size = size
        self.stream_limit = stream_limit
        self._field = field
        self._maxlen = maxlen
        self._expire_ms = expire_ms
        self._queue: deque[tuple[str, bytes, float]] = deque()
        #: Entries dropped unsent because their deadline passed while queued.
        self.expired = 0
        self._ready = anyio.Event()
        # Senders waiting for room, woken first come first served, one per entry
        # written (not all at once: thousands may wait past capacity).
        self._putters: deque[asyncio.Future[None]] = deque()
        self._drained: anyio.Event | None = None
        # Each stream's length as last read, plus what was written since: an upper
        # bound (workers only shorten streams), read again once it reaches the limit.
        self._lengths: dict[str, int] = {}
        #: Entries ever queued, and ever taken off the queue (written, or dropped
        #: expired): the entry queued n-th is done once ``finished >= n``.
        self.appended = 0
        self.finished = 0
        self._progress: anyio.Event | None = None
        #: Called as each batch is sent, with the position of its last entry (see
        #: :attr:`appended`): a tracer's (see ``trace``).
        self.on_writing: Callable[[int], None] | None = None
        #: Called as a batch is taken that empties the queue, while no sender waits
        #: for room: commands to send after the batch, in its pipeline (None: none).
        #: Every entry queued before the call goes in that batch or went before it.
        self.riders: Callable[[], Riders | None] | None = None
        # Senders in :meth:`put` waiting for room, or woken and not yet queued.
        self._blocked = 0
        # One writer at a time: a batch leaves the queue only once written, so a
        # second writer (a closing transport's last flush) would write it again.
        self._writing = anyio.Lock()

    def __len__(self) -> int:
        return len(self._queue)

    def full(self) -> bool:
        """True when ``size`` entries are queued."""
        return len(self._queue) >= self.size

    def put_nowait(self, item: tuple[str, bytes, float]) -> None:
        """Queue ``item`` (the caller checked :meth:`full`)."""
        self._queue.append(item)
        self.appended += 1
        self._ready.set()

    async def written(self, position: int) -> None:
        """Wait until the entry queued ``position``-th (see :attr:`appended`) is
        written, or dropped because its deadline passed."""
        while self.finished < position:
            if self._progress is None:
                self._progress = anyio.Event()
            await self._progress.wait()

    def _taken(self, count: int) -> None:
        """``count`` entries left the head of the queue: wake who waits for them."""
        self.finished += count
        progress, self._progress = self._progress, None
        if progress is not None:
            progress.set()
        self._wake(count)

    async def put(self, item: tuple[str, bytes, float]) -> None:
        """Queue ``item``, waiting while the outbox is full."""
        if self.full():
            self._blocked += 1
            try:
                await self._room()
            finally:
                self._blocked -= 1
        self.put_nowait(item)

    async def _room(self) -> None:
        """Wait until the outbox is not full, first come first served."""
        while self.full():
            waiter = asyncio.get_running_loop().create_future()
            self._putters.append(waiter)
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled() and not self.full():
                    self._wake(1)  # woken, then cancelled: pass the room on
                waiter.cancel()
                raise

    def _wake(self, count: int) -> None:
        """Wake up to ``count`` waiting senders, oldest first."""
        putters = self._putters
        while count > 0 and putters:
            waiter = putters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                count -= 1

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
        async with self._writing:
            await self._write_queued()

    async def _write_queued(self) -> None:
        while self._drop_expired_head():
            await self._wait_for_room()
            batch, taken = self._next_batch()
            if self.on_writing is not None:
                self.on_writing(self.finished + taken)
            if batch:
                riders = None
                if self.riders is not None and taken == len(self._queue) and not self._blocked:
                    riders = self.riders()
                await self._write(batch, riders)
            lengths = self._lengths
            for stream, _ in batch:
                lengths[stream] = lengths.get(stream, 0) + 1
            self.expired += taken - len(batch)
            for _ in range(taken):
                self._queue.popleft()
            self._taken(taken)
        drained, self._drained = self._drained, None
        if drained is not None:
            drained.set()

    async def _write(self, batch: list[tuple[str, bytes]], riders: Riders | None) -> None:
        """XADD ``batch``: one script call per stream, all in one pipeline (one round
        trip, and one reply per stream rather than per entry), with the commands of
        ``riders`` after them."""
        maxlen = "" if self._maxlen is None else self._maxlen
        ttl = "" if self._expire_ms is None else self._expire_ms
        head = [self._field, maxlen, ttl]
        # Per stream, the call being filled and its size in bytes.
        filling: dict[str, tuple[list[Any], int]] = {}
        calls: list[tuple[list[Any], list[Any]]] = []
        for stream, data in batch:
            current = filling.get(stream)
            if current is None or current[1] + len(data) > _CALL_BYTES:
                args = [*head, data]
                calls.append(([stream], args))
                filling[stream] = (args, len(data))
            else:
                args, size = current
                args.append(data)
                filling[stream] = (args, size + len(data))
        if riders is None:
            with redis_errors("XADD from the outbox"):
                await eval_pipelined(wire(self._client()), _scripts.XADD_MANY, calls)
            return
        try:
            with redis_errors("XADD from the outbox"):
                results = await eval_pipelined(
                    wire(self._client()), _scripts.XADD_MANY, calls, riders.commands
                )
        except BaseException:
            riders.give_back()
            raise
        await riders.check(results[len(calls) :])

    def _drop_expired_head(self) -> bool:
        """Drop the expired entries at the head of the queue; True if any is left."""
        queue = self._queue
        if queue and queue[0][2] < math.inf:
            now = time.time()
            dropped = 0
            while queue and queue[0][2] < now:
                queue.popleft()
                dropped += 1
            self.expired += dropped
            self._taken(dropped)
        return bool(queue)

    def _next_batch(self) -> tuple[list[tuple[str, bytes]], int]:
        """The entries at the head of the queue that their streams have room for,
        and how many queued entries they stand for (expired ones are skipped).

        The batch ends before the first entry whose stream would pass
        ``stream_limit`` (as of the lengths last seen), so a stream nobody reads
        stays bounded even while the head of the queue is for another one; the
        head always has room (:meth:`_wait_for_room` saw to it).
        """
        room: dict[str, int] = {}
        batch: list[tuple[str, bytes]] = []
        now = time.time()
        taken = 0
        for i in range(min(len(self._queue), _BATCH)):
            stream, data, deadline = self._queue[i]
            if deadline < now:
                taken += 1
                continue
            left = room.get(stream)
            if left is None:
                known = self._lengths.get(stream)
                if known is None and batch:
                    break  # not measured yet: it becomes the head, and is measured then
                left = self.stream_limit - (known or 0)
            if left <= 0 and batch:
                break
            room[stream] = left - 1
            batch.append((stream, data))
            taken += 1
        return batch, taken

    async def _wait_for_room(self) -> None:
        """Pause while the stream the next entry goes to is over ``stream_limit``
        (measuring it first if this outbox has not written to it yet)."""
        stream = self._queue[0][0]
        known = self._lengths.get(stream)
        if known is not None and known < self.stream_limit:
            return
        pause = 0.02
        waited = False
        while True:
            with redis_errors(f"XLEN {stream}"):
                length = int(await self._client().xlen(stream))
            self._lengths[stream] = length
            if length < self.stream_limit:
                if waited:
                    log.info("stream_has_room", stream=stream, length=length)
                return
            if not waited:
                log.warning("stream_full_waiting", stream=stream, length=length)
                waited = True
            await anyio.sleep(pause)
            pause = min(pause * 2, _MAX_FULL_PAUSE)
