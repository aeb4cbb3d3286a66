"""The shared read: one blocking XREADGROUP over every shard a worker owns.

Outside a Redis Cluster every shard stream of a deployment is on one server, so a
worker reads all the shards it owns with one XREADGROUP, one ``STREAMS`` key per
shard (each stream has its own consumer group ``workers``), instead of a blocking
read per shard: a read carries the entries of every shard that has some, and the
worker's loop turns once for them. The acks of the entries handled since the last
read that did not go with their replies (one script call for every shard, each
fenced by the shard's lease: see ``_acks``) go in one pipeline with the read: the
server runs them before the read blocks. On a Redis Cluster the shards' streams are
in different slots, and each shard is read on its own (see ``Intake``).

A shard joins the read once its intake has claimed what earlier owners left pending,
and leaves it when it is lost or given back; a shard whose lease was not renewed
lately is left out of the reads until it is. A join or a leave cuts the read in
flight short: the worker's *wake-up stream* (``Keys.wake``) is read with the shards,
and an entry added to it ends the read. Nothing of a shard that left is handled from
a read it was in (its entries stay pending, for its next owner), and a shard given
back is released only once no read in flight holds its stream (:meth:`SharedRead.left`),
so that its next owner's claim of the pending entries finds them all.
"""

from __future__ import annotations

import asyncio
import functools
import time
from typing import TYPE_CHECKING, Any, Final

import anyio
import redis.exceptions as rexc
import structlog

from actormem.runtime.errors import TransportError
from actormem.runtime.redis._client import redis_errors
from actormem.runtime.redis._loops import delete_quietly, wait_open
from actormem.runtime.redis._retry import forever
from actormem.runtime.redis._wire import wire
from actormem.runtime.redis.keys import CONSUMER_GROUP

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from actormem.runtime.redis._commits import GroupCommit
    from actormem.runtime.redis._handover import Handover
    from actormem.runtime.redis._shards import Holdings, Link, Shard

__all__ = ("SharedRead",)

log = structlog.get_logger("actormem.redis")

#: Entries kept in a wake-up stream (each only ends a read).
_WAKE_MAXLEN: Final = 16
#: What a read returns when a stream had lost its consumer group (made again).
_REGROUPED: Final = object()
#: A wake-up stream's time to live (ms), renewed with each entry; one that expires
#: while its worker lives is made again at its next read.
_WAKE_TTL_MS: Final = 24 * 3600 * 1000


class SharedRead:
    """Reads every shard the worker owns with one blocking call (see the module
    docstring).

    Args:
        link: the transport, whose id is its consumer's name in the groups.
        held: the shards and actors this worker holds.
        commits: acks what was handled.
        handle: delivers the entries one read brought of one shard (``Intake.handle``).
        claim: claims what stayed pending too long on a shard, and trims its stream
            (``Intake.claim``).
        ensure_group: makes a stream's consumer group if it has none.
        lease_fresh: whether this worker's lease on a shard was recently renewed.
        replies_queued: whether the reply outbox has replies queued (the acks then go
            with them, not with the read: see ``_acks``).
        batch: entries read per stream, at most.
    """

    def __init__(
        self,
        link: Link,
        *,
        held: Holdings,
        commits: GroupCommit,
        handle: Callable[[Shard, Any], Awaitable[None]],
        claim: Callable[[Shard], Awaitable[None]],
        ensure_group: Callable[[Any, str], Awaitable[None]],
        lease_fresh: Callable[[int], bool],
        replies_queued: Callable[[], bool],
        batch: int,
    ) -> None:
        self._link = link
        self._config = link.config
        self._keys = link.keys
        self._held = held
        self._commits = commits
        self._handle = handle
        self._claim = claim
        self._ensure_group = ensure_group
        self._lease_fresh = lease_fresh
        self._replies_queued = replies_queued
        self._batch = batch
        self._wake_key = self._keys.wake(link.id)
        self._wake_name = self._wake_key.encode()
        # Each shard's stream name as a reply names it, by number.
        self._names = [self._keys.stream(n).encode() for n in range(self._config.shards)]
        #: Told when a read found a shard's stream at its end (see ``Handover.read``).
        self.handover: Handover | None = None
        # The shards joined, by number, and when each is next claimed (monotonic s).
        self._joined: dict[int, Shard] = {}
        self._next_claim: dict[int, float] = {}
        # Set (and replaced) when a shard joins: an idle reader reads again.
        self._changed = anyio.Event()
        # The shards of the read in flight (None: none is), and the event set when
        # it returns.
        self._flight: dict[int, Shard] | None = None
        self._returned = anyio.Event()
        # A wake-up entry was added for the read in flight.
        self._woken = False
        # The wake-up entries read, acked with the next read.
        self._wake_acks: list[bytes] = []
        # The shard whose entries are being handled, and the scope that stops it.
        self._current: tuple[Shard, anyio.CancelScope] | None = None
        # The read command, by the shards it reads (rebuilt when they change).
        self._commands: dict[tuple[int, ...], tuple[Any, ...]] = {}

    # -- joining and leaving ----------------------------------------------------------

    async def serve(self, shard: Shard) -> None:
        """Keep ``shard`` in the read until cancelled (its lease lost or given back)."""
        self._joined[shard.number] = shard
        self._next_claim[shard.number] = time.monotonic() + self._config.claim_idle_ms / 2000
        self._changed.set()
        try:
            await self._wake()
            await anyio.sleep_forever()
        finally:
            self.leave(shard)

    def leave(self, shard: Shard) -> None:
        """Take ``shard`` out of the read, and stop handling entries of it at once."""
        if self._joined.get(shard.number) is shard:
            del self._joined[shard.number]
            self._next_claim.pop(shard.number, None)
        current = self._current
        if current is not None and current[0] is shard:
            current[1].cancel()

    async def left(self, shards: list[Shard]) -> None:
        """Return once no read in flight holds the streams of ``shards`` (which
        :meth:`leave` took out): cut it short, and wait for it to return."""
        flight = self._flight
        if flight is None or not any(flight.get(s.number) is s for s in shards):
            return
        returned = self._returned
        await self._wake()
        await returned.wait()

    async def _wake(self) -> None:
        """End the read in flight (if any, and not woken yet): its shards changed.
        A failure is logged: the read ends by itself within ``block_ms``."""
        if self._flight is None or self._woken:
            return
        self._woken = True
        client: Any = self._link.client
        try:
            with redis_errors("waking the shared read"):
                async with client.pipeline(transaction=False) as pipe:
                    pipe.xadd(self._wake_key, {b"w": b""}, maxlen=_WAKE_MAXLEN, approximate=False)
                    pipe.pexpire(self._wake_key, _WAKE_TTL_MS)
                    await pipe.execute()
        except TransportError as exc:
            log.warning("shared_read_not_woken", reason=str(exc))

    # -- reading ------------------------------------------------------------------------

    async def run(self) -> None:
        """Read the joined shards and deliver their entries, until cancelled."""
        config = self._config
        host = self._link.host
        await wait_open(self._link)
        await forever("create_group", self._ensure_wake)
        while True:
            if not host.is_open:
                await anyio.sleep_forever()  # shutting down: read nothing new
            shards, response = await forever("read", self._read)
            if not shards:
                self._changed = anyio.Event()
                with anyio.move_on_after(config.block_ms / 1000):
                    await self._changed.wait()
                continue
            if response is not _REGROUPED:
                await self._deliver(shards, response)
                # The handlers of what was delivered run before the next read is sent:
                # the acks of the read-only commands that answered nobody through the
                # reply outbox go with it (not with the one after), and what came
                # meanwhile makes that read fuller.
                await asyncio.sleep(0)
            now = time.monotonic()
            for number, shard in shards.items():
                if self._next_claim.get(number, now + 1) <= now and self._holds(shard):
                    self._next_claim[number] = now + config.claim_idle_ms / 2000
                    await self._within(shard, functools.partial(self._claim, shard))

    async def _read(self) -> tuple[dict[int, Shard], Any]:
        """One pipeline: the acks of the shards read (unless they wait for the reply
        outbox) and of the wake-up entries read, then the blocking read of them; the
        shards and the read's reply (``_REGROUPED`` when a stream had lost its
        consumer group: made again).

        The shards read are those joined whose lease was renewed lately (another
        worker may own one that was not by now: it is read again once the heartbeat
        settles it); none, and nothing is read."""
        shards = {n: s for n, s in self._joined.items() if self._lease_fresh(n)}
        if not shards:
            return shards, None
        keys = self._keys
        # While replies are queued the acks wait to go with them (see ``_acks``).
        acks = self._commits.take_acks(() if self._replies_queued() else shards.values())
        commands = list(acks.commands)
        wake_acks, self._wake_acks = self._wake_acks, []
        if wake_acks:
            commands.append(("XACK", self._wake_key, CONSUMER_GROUP, *wake_acks))
        commands.append(self._command(tuple(shards)))
        self._flight, self._woken = shards, False
        returned = self._returned = anyio.Event()
        try:
            with redis_errors(f"XREADGROUP of {len(shards)} shard streams"):
                replies = await wire(self._link.blocking_client).pipeline(commands)
        except BaseException:
            # Whether they ran is not known: acked again with a later call.
            acks.give_back()
            self._wake_acks[:0] = wake_acks
            raise
        finally:
            self._flight = None
            returned.set()
        await acks.check(replies)
        reply = replies[-1]
        if isinstance(reply, rexc.ResponseError):
            if "NOGROUP" not in str(reply) and "UNBLOCKED" not in str(reply):
                with redis_errors("XREADGROUP"):
                    raise reply
            # A stream was lost (a restart without AOF, or the wake-up stream expired
            # while the worker had no lease changes for a day): its group is made again.
            await self._ensure_wake()
            client: Any = self._link.client
            for number in shards:
                await self._ensure_group(client, keys.stream(number))
            return shards, _REGROUPED
        return shards, reply

    def _command(self, numbers: tuple[int, ...]) -> tuple[Any, ...]:
        """The blocking XREADGROUP of the wake-up stream and of the shards ``numbers``."""
        command = self._commands.get(numbers)
        if command is None:
            if len(self._commands) > 64:
                self._commands.clear()
            streams = [self._wake_key, *map(self._keys.stream, numbers)]
            command = self._commands[numbers] = (
                *("XREADGROUP", "GROUP", CONSUMER_GROUP, self._link.id),
                *("COUNT", self._batch, "BLOCK", self._config.block_ms),
                *("STREAMS", *streams, *(">" for _ in streams)),
            )
        return command

    async def _deliver(self, shards: dict[int, Shard], response: Any) -> None:
        """Hand each shard's entries of ``response`` to the intake, shard after shard;
        a shard whose read found its stream's end is told to the hand-over."""
        names = {self._names[n]: s for n, s in shards.items()}
        read: set[int] = set()
        for name, entries in _streams_of(response):
            if name == self._wake_name:
                self._wake_acks.extend(entry for entry, _ in entries)
                continue
            shard = names.get(name)
            if shard is None or not entries:
                continue
            read.add(shard.number)
            if self._holds(shard):
                await self._within(shard, functools.partial(self._handle, shard, entries))
        handover = self.handover
        if handover is not None:
            for number, shard in shards.items():
                if number not in read and self._holds(shard):
                    handover.read(shard, [], True)  # nothing new was left in it

    def _holds(self, shard: Shard) -> bool:
        """True while ``shard`` is owned and in the read."""
        return self._joined.get(shard.number) is shard

    async def _within(self, shard: Shard, work: Callable[[], Awaitable[None]]) -> None:
        """Run ``work`` on ``shard``, stopped as soon as the shard leaves."""
        with anyio.CancelScope() as scope:
            self._current = (shard, scope)
            try:
                await work()
            finally:
                self._current = None

    async def _ensure_wake(self) -> None:
        client: Any = self._link.client
        await self._ensure_group(client, self._wake_key)
        with redis_errors("setting the wake-up stream's time to live"):
            await client.pexpire(self._wake_key, _WAKE_TTL_MS)

    async def delete_wake(self) -> None:
        """Delete the wake-up stream (the worker stops; a failure leaves it to expire)."""
        await delete_quietly(self._link, self._wake_key, "the wake-up stream")


def _streams_of(response: Any) -> Any:
    """``(stream name, entries)`` of an XREADGROUP reply as the server sent it (RESP2:
    a list of pairs; RESP3: a map)."""
    if not response:
        return ()
    if isinstance(response, dict):
        return response.items()
    return response
