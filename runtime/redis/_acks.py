"""Acks: the XACKs of handled entries that travel with a call the worker makes anyway.

A command that stores nothing (a read, a tell to an actor that is not durable) is
acked by a fenced ACK script call (``_scripts.ACK``: refused when the shard's lease
is no longer ours), queued on its shard (``Shard.acks``) until a call takes it:

- a write of the reply outbox, while it has replies queued (see
  ``GroupCommit.riding``): the acks go after the replies, in the same pipeline. A
  handler queues its command's ack and then its reply in one step (no wait between
  them, see ``GroupCommit.handled``), and the outbox takes acks only with a batch
  that empties its queue, so an ack never reaches Redis before the reply to its
  entry: a worker that dies between them leaves the entry pending, and the shard's
  next owner handles it again;
- else the next shared read (``_shared_read``), in one pipeline with it;
- on a Redis Cluster, whose reply streams are in other slots than the shards' keys,
  a call of their own after each read (``GroupCommit.flush_acks``).

Acks whose call failed are queued again, and go with a later call: XACK twice is
harmless, and none is lost while Redis is away.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

import redis.exceptions as rexc
import structlog

from actormem.runtime.errors import TransportError
from actormem.runtime.redis import _scripts
from actormem.runtime.redis._client import script_sha
from actormem.runtime.redis.keys import CONSUMER_GROUP

if TYPE_CHECKING:
    from actormem.runtime.redis._shards import Shard
    from actormem.runtime.redis.keys import Keys

__all__ = ("Acks",)

log = structlog.get_logger("actormem.redis")


class Acks:
    """The acks queued on ``shards``, taken off them for one call.

    Args:
        keys: the deployment's key names.
        shards: the shards whose queued acks are taken.
        ack: acks a shard's entries in a call of its own (loading the script).

    Attributes:
        commands: one fenced ACK call per shard with acks, for the call's pipeline.
    """

    __slots__ = ("_ack", "_taken", "commands")

    def __init__(
        self,
        keys: Keys,
        shards: Iterable[Shard],
        ack: Callable[[Shard, list[str]], Awaitable[None]],
    ) -> None:
        self._ack = ack
        self._taken: list[tuple[Shard, list[str]]] = []
        self.commands: list[tuple[Any, ...]] = []
        sha = script_sha(_scripts.ACK)
        for shard in shards:
            if shard.acks:
                entries, shard.acks = shard.acks, []
                self._taken.append((shard, entries))
                number = shard.number
                self.commands.append(
                    (
                        *("EVALSHA", sha, 2, keys.lease(number), keys.stream(number)),
                        *(shard.lease, CONSUMER_GROUP, *entries),
                    )
                )

    def __bool__(self) -> bool:
        return bool(self._taken)

    def give_back(self) -> None:
        """The call failed, so whether the acks ran is not known: queue them again, at
        the front (they go with a later call)."""
        for shard, entries in self._taken:
            shard.acks[:0] = entries

    async def check(self, replies: list[Any]) -> None:
        """Check the server's ``replies`` to :attr:`commands`: an ack the server could
        not run for want of the script is made again on its own (loading it), one
        that failed is queued again, one under a lease no longer ours is logged."""
        for (shard, entries), reply in zip(self._taken, replies, strict=False):
            if isinstance(reply, rexc.NoScriptError):
                try:
                    await self._ack(shard, entries)
                except TransportError:
                    shard.acks[:0] = entries
            elif isinstance(reply, rexc.ResponseError):
                log.warning("ack_failed", shard=shard.number, reason=str(reply))
                shard.acks[:0] = entries
            elif reply == -1:
                log.warning("ack_fenced_off", shard=shard.number, entries=len(entries))
