"""The worker side of the transport: shards taken through leases, served, and let go.

A worker registers, then takes its share of the shards (see ``_leases``); for each
shard it gains it starts the shard's intake, and for each it loses it stops
reading, stores what was handled (when it gives the shard back), passivates
the shard's actors and sends the asks handed over to them and not answered through
the stream (see ``_handover``). It also reads the broadcasts, and passivates durable actors
that stayed idle for ``passivate_after``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Final

import anyio
import structlog

from actormem.runtime.errors import RuntimeClosedError, TransportError, TransportUnavailableError
from actormem.runtime.redis._client import is_cluster
from actormem.runtime.redis._leases import LeaseManager
from actormem.runtime.redis._loops import OPEN_POLL, stream_end, tail, wait_open
from actormem.runtime.redis._shards import Shard

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from actormem.runtime._envelope import Envelope
    from actormem.runtime.redis._commits import GroupCommit
    from actormem.runtime.redis._handover import HandedTell, Handover
    from actormem.runtime.redis._intake import Intake
    from actormem.runtime.redis._shards import Holdings, Link
    from actormem.runtime.transports.base import TransportHost

__all__ = ("Owner",)

log = structlog.get_logger("actormem.redis")

#: Pause between a worker's registration and its first shard acquisition (s).
_FIRST_ROUND_PAUSE: Final = 0.5


class Owner:
    """Takes, serves and lets go of a worker's shards.

    Args:
        link: the transport, whose id is this worker's name in leases.
        held: the shards and actors this worker holds.
        intake: reads a shard it gains, and fans the broadcasts out.
        commits: stores what was handled on a shard it gives back.
        handover: the asks and tells handed over to the actors of its shards.
        send_again: sends a handed-over ask through the stream.
        tell_again: queues a handed-over tell for the stream.
    """

    def __init__(
        self,
        link: Link,
        *,
        held: Holdings,
        intake: Intake,
        commits: GroupCommit,
        handover: Handover,
        send_again: Callable[[Envelope], Awaitable[None]],
        tell_again: Callable[[HandedTell], None],
    ) -> None:
        self._link = link
        self._config = link.config
        self._keys = link.keys
        self._held = held
        self._intake = intake
        self._commits = commits
        self._handover = handover
        self._send_again = send_again
        self._tell_again = tell_again
        self._leases: LeaseManager | None = None

    @property
    def leases(self) -> LeaseManager | None:
        """The lease manager (None until the worker started)."""
        return self._leases

    def fresh(self, shard: int) -> bool:
        """True while this worker's lease on ``shard`` was recently renewed."""
        return self._leases is not None and self._leases.fresh(shard)

    async def start(self, host: TransportHost, *, alone: bool = False) -> None:
        """Start the lease heartbeat, the broadcast reader and the passivation, in
        the runtime's task group.

        Args:
            host: the runtime.
            alone: no other worker can reach this Redis (an embedded server the
                transport started): the first round takes the shards at once,
                without the pause that lets workers started together share them.
        """
        config = self._config
        self._leases = LeaseManager(
            self._link.client,
            self._keys,
            self._link.id,
            config.shards,
            config.lease_ms,
            self._gained,
            self._lost,
        )
        # Broadcasts count from now: those sent before this worker started are old.
        stream = self._keys.broadcast()
        start = await stream_end(self._link, stream)
        host.spawn(self._read_broadcasts, stream, start)
        if not is_cluster(self._link.client):
            self._intake.share_reads(host)
        host.spawn(self._lease_loop, self._leases, alone)
        host.spawn(self._passivate_loop)

    async def settle_all(self) -> None:
        """The runtime has stopped: stop reading, store what was handled (and answer
        it); what is still in flight stays pending, for the next owner, and giving
        the leases back need not wait for it."""
        self._intake.leave(list(self._held.shards.values()))
        for shard in self._held.shards.values():
            shard.scope.cancel()
            await self._commits.settle(shard, self._config.retry_for)
            shard.inflight.clear()
        await self._commits.settle_erasures(self._config.socket_timeout)
        await self._intake.shared.delete_wake()

    async def release(self) -> None:
        """Give the leases back at once: other workers take the shards over without
        waiting for them to expire."""
        leases = self._leases
        if leases is None:
            return
        with anyio.move_on_after(self._config.socket_timeout, shield=True):
            try:
                await leases.release_all()
            except TransportError as exc:
                log.warning("shard_release_failed", reason=str(exc))

    def _host(self) -> TransportHost | None:
        try:
            return self._link.host
        except RuntimeClosedError:
            return None

    def _serving(self) -> TransportHost | None:
        """The runtime, while it is open; None once it began to close."""
        host = self._host()
        return host if host is not None and host.is_open else None

    async def _read_broadcasts(self, stream: str, start: str) -> None:
        fan_out = self._intake.fan_out
        await tail(self._link, stream, start, b"e", fan_out, block_ms=self._config.block_ms)

    async def _lease_loop(self, leases: LeaseManager, alone: bool) -> None:
        await wait_open(self._link)
        # The first round only registers, then a short pause: enough for workers
        # started together to see each other, too short to delay a lone one much.
        # A worker no other can join (``alone``) takes its shards in that round.
        registered = alone
        pause = min(leases.interval, _FIRST_ROUND_PAUSE)
        while True:
            try:
                # A closing runtime renews what it holds (its last commands are
                # stored under those leases) but takes no more shards.
                wait = await leases.heartbeat(acquire=registered and self._serving() is not None)
            except TransportUnavailableError as exc:
                log.warning("lease_heartbeat_failed", reason=str(exc))
                await anyio.sleep(leases.interval if registered else pause)
                continue
            first_round = not registered
            registered = True
            await anyio.sleep(pause if first_round else wait)

    async def _gained(self, number: int, lease: str) -> None:
        host = self._serving()
        if host is None:
            # The lease was taken as the runtime began to close (its reply came
            # before the lease loop was cancelled): the runtime starts no more tasks
            # and a closing worker serves no new shard. The lease manager holds the
            # lease, and closing gives it back with the others.
            log.info("shard_gained_while_closing", shard=number, worker=self._link.id)
            return
        shard = self._held.shards[number] = Shard(number, lease)
        self._handover.gained(shard)
        host.spawn(self._consume, shard)

    async def _consume(self, shard: Shard) -> None:
        with shard.scope:
            await self._intake.consume(shard)

    async def _lost(self, numbers: list[int], released: bool) -> None:
        held = self._held
        shards = [held.shards[n] for n in numbers if n in held.shards]
        self._intake.leave(shards)  # read and deliver nothing more from them
        for shard in shards:
            shard.scope.cancel()
        # A third of a lease at most, so the other leases are renewed in time: the
        # read that may still take entries of them returns (their next owner claims
        # those), and, when they are given back, what was delivered finishes and is
        # acked before the leases go.
        with anyio.move_on_after(self._config.lease_ms / 3000):
            await self._intake.left(shards)
            while released and any(shard.inflight for shard in shards):  # noqa: ASYNC110 (bounded)
                await anyio.sleep(OPEN_POLL)
        if released:
            for shard in shards:
                await self._commits.settle(shard, self._config.socket_timeout)
        for shard in shards:
            held.shards.pop(shard.number, None)
        host = self._host()
        for address, record in list(held.actors.items()):
            if record.shard in numbers:
                del held.actors[address]
                if host is not None and not await host.passivate(address):
                    # Busy: its state may hold changes that were never stored (the
                    # commit was fenced off). Were it kept, this worker taking the
                    # shard again would apply the redelivered commands on top.
                    dropped = host.discard(address)
                    log.info("actor_discarded", actor=address, shard=record.shard, mail=dropped)
        # Handed over and not answered (or stored): no entry of theirs stays pending
        # for the shard's next owner, so they go to it through the stream.
        back, told = self._handover.lost(numbers)
        for tell in told:
            # Queued even while closing: should the outbox not write it, its sender's
            # commit keeps it in the unsent hash, and it is sent again from there.
            self._tell_again(tell)
        if self._serving() is None:
            return  # closing: their asks fail with the runtime
        for envelope in back:
            try:
                await self._send_again(envelope)
            except RuntimeClosedError:
                return  # closing: their asks fail with the runtime

    async def _passivate_loop(self) -> None:
        after = self._config.passivate_after
        held = self._held
        while True:
            await anyio.sleep(min(after / 2, 5.0))
            host = self._host()
            if host is None:
                return
            cutoff = time.monotonic() - after
            for address, record in list(held.actors.items()):
                idle = record.durable and not record.busy and record.last_used < cutoff
                if idle and await host.passivate(address):
                    held.actors.pop(address, None)
                    log.debug("actor_passivated", actor=address)
