"""Asks to shards no worker owns: failed within ``no_owner_timeout``, not the ask timeout.

Every ask this transport makes is watched from the moment it is queued: a
background loop reads the lease of each watched ask's shard and the count of live
workers (one pipeline, a few times a second, only while asks are watched). An ask
whose shard is seen leased is let go: its worker answers it, or its ask timeout
runs as usual. An ask whose shard has had no lease since it was queued fails with
:class:`NoOwnerError`, naming the shard: after ``no_owner_timeout`` seconds when
no worker is live, or after that plus one lease (``lease_ms``) when workers are
live but none took the shard (a hand-over takes less). A worker that takes the
shard meanwhile serves the ask as any other; the command stays in the stream
either way, like an ask that timed out.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import anyio
import structlog

from actormem.runtime._envelope import Reply
from actormem.runtime.errors import NoOwnerError, RuntimeClosedError, TransportError
from actormem.runtime.redis._client import redis_errors
from actormem.runtime.redis._loops import wait_open

if TYPE_CHECKING:
    from actormem.runtime._envelope import Envelope
    from actormem.runtime.redis._shards import Link

__all__ = ("UnownedAsks",)

log = structlog.get_logger("actormem.redis")

#: The longest pause between two looks at the watched shards' leases (s).
_MAX_POLL: Final = 0.25


class _Watched(NamedTuple):
    shard: int
    address: str
    message: str
    since: float


class UnownedAsks:
    """Watches this transport's asks until their shard is seen owned, and fails
    those whose shard stays unowned (see the module docstring).

    Args:
        link: the transport (its config's ``no_owner_timeout``; 0 watches nothing).
    """

    def __init__(self, link: Link) -> None:
        self._link = link
        self._timeout = link.config.no_owner_timeout
        self._poll = min(self._timeout / 8, _MAX_POLL)
        self._asks: dict[int, _Watched] = {}
        self._wake: anyio.Event | None = None  # made in run(), inside the event loop

    def watch(self, envelope: Envelope, shard: int) -> None:
        """Watch ``envelope`` if it is an ask made here, bound for ``shard``."""
        correlation = envelope.correlation
        if not self._timeout or correlation is None:
            return
        name = type(envelope.body).__name__
        self._asks[correlation] = _Watched(shard, envelope.recipient, name, time.monotonic())
        if self._wake is not None:
            self._wake.set()

    async def run(self) -> None:
        """Look at the leases of the watched asks' shards while there are any, for ever."""
        if not self._timeout:
            return
        await wait_open(self._link)
        while True:
            if not self._asks:
                self._wake = wake = anyio.Event()
                await wake.wait()
            await anyio.sleep(self._poll)
            try:
                owned, live = await self._owned({w.shard for w in self._asks.values()})
            except TransportError as exc:
                # Redis is away: the asks' own timeouts still end them.
                log.debug("owner_check_failed", reason=str(exc))
                continue
            except RuntimeClosedError:
                return
            self._settle(owned, live)

    async def _owned(self, shards: set[int]) -> tuple[set[int], int]:
        """Which of ``shards`` have a lease now, and how many workers are live."""
        keys = self._link.keys
        order = sorted(shards)
        with redis_errors("reading the shard leases"):
            async with self._link.client.pipeline(transaction=False) as pipe:
                for shard in order:
                    pipe.exists(keys.lease(shard))
                # ZRANGE BYSCORE, not ZCOUNT: a worker's ACL allows the one, not the other.
                pipe.zrange(keys.workers(), int(time.time() * 1000), "+inf", byscore=True)
                found: list[Any] = await pipe.execute()
        owned = {shard for shard, leased in zip(order, found, strict=False) if leased}
        return owned, len(found[-1])

    def _settle(self, owned: set[int], live: int) -> None:
        """Let go of the asks whose shard is owned; fail those unowned too long."""
        now = time.monotonic()
        try:
            host = self._link.host
        except RuntimeClosedError:
            return
        allowed = self._timeout + (self._link.config.lease_ms / 1000 if live else 0.0)
        for correlation, watched in list(self._asks.items()):
            if watched.shard in owned:
                del self._asks[correlation]
            elif now - watched.since >= allowed:
                del self._asks[correlation]
                # An ask already answered is not waiting any more: the runtime drops this.
                host.resolve(Reply(correlation, error=self._error(watched, live, allowed)))

    def _error(self, watched: _Watched, live: int, waited: float) -> NoOwnerError:
        lease = self._link.keys.lease(watched.shard)
        why = (
            f"none of the {live} live workers took it"
            if live
            else "no worker of this deployment is live"
        )
        return NoOwnerError(
            watched.address,
            f"no worker owns shard {watched.shard} ({lease} has no holder; {why}): "
            f"{watched.message} failed after {waited:g}s (redis.no_owner_timeout="
            f"{self._timeout:g}); start a worker, or check that the workers use the same "
            "redis url, prefix and shards",
        )
