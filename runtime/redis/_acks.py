"""Acks: the XACKs of handled entries that travel with a call the worker makes anyway.

A command that stores nothing (a read, a tell to an actor that is not durable) is
acked by a fenced script call (refused when the shard's lease is no longer ours),
queued on its shard (``Shard.acks``) until a call takes it, with the acks of the
other shards owned, in one ``_scripts.ACK_MANY`` call:

- a write of the reply outbox, while it has replies queued (see
  ``GroupCommit.riding``): the acks go after the replies, in the same pipeline. A
  handler queues its command's ack and then its reply in one step (no wait between
  them, see ``GroupCommit.handled``), and the outbox takes acks only with a batch
  that empties its queue, so an ack never reaches Redis before the reply to its
  entry: a worker that dies between them leaves the entry pending, and the shard's
  next owner handles it again;
- else the next shared read (``_shared_read``), in one pipeline with it;
- on a Redis Cluster, whose shards' keys and reply streams are all in different
  slots, an ``_scripts.ACK`` call per shard of its own after each read
  (``GroupCommit.flush_acks``).

Acks whose call failed are queued again, and go with a later call: XACK twice is
harmless, and none is lost while Redis is away.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import redis.exceptions as rexc
import structlog

from actormem.runtime.errors import TransportError
from actormem.runtime.redis import _scripts
from actormem.runtime.redis._client import redis_errors, run_script, script_sha
from actormem.runtime.redis.keys import CONSUMER_GROUP

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from actormem.runtime.redis._shards import Shard
    from actormem.runtime.redis._wire import Wire
    from actormem.runtime.redis.keys import Keys

__all__ = ("Acks",)

log = structlog.get_logger("actormem.redis")


class Acks:
    """The acks queued on ``shards``, taken off them for one call: one fenced ACK
    script call for all of them (``_scripts.ACK_MANY``, not on a Redis Cluster).

    Args:
        keys: the deployment's key names.
        shards: the shards whose queued acks are taken.
        client: what runs the call again on its own when the server had not loaded
            the script.

    Attributes:
        commands: the call for the pipeline it goes in (none when no ack was queued).
    """

    __slots__ = ("_args", "_client", "_keys", "_taken", "commands")

    def __init__(self, keys: Keys, shards: Iterable[Shard], client: aioredis.Redis | Wire) -> None:
        self._client = client
        self._taken: list[tuple[Shard, list[str]]] = []
        self._keys: list[str] = []
        self._args: list[Any] = [CONSUMER_GROUP]
        for shard in shards:
            if shard.acks:
                entries, shard.acks = shard.acks, []
                self._taken.append((shard, entries))
                self._keys += (keys.lease(shard.number), keys.stream(shard.number))
                self._args += (shard.lease, len(entries), *entries)
        self.commands: list[tuple[Any, ...]] = []
        if self._taken:
            sha = script_sha(_scripts.ACK_MANY)
            self.commands.append(("EVALSHA", sha, len(self._keys), *self._keys, *self._args))

    def __bool__(self) -> bool:
        return bool(self._taken)

    def give_back(self) -> None:
        """The call failed, so whether the acks ran is not known: queue them again, at
        the front (they go with a later call)."""
        for shard, entries in self._taken:
            shard.acks[:0] = entries

    async def check(self, replies: list[Any]) -> None:
        """Check the server's ``replies`` to :attr:`commands` (in order, the first
        ones of ``replies``): a call the server could not run for want of the script
        is made again on its own (loading it); acks that failed are queued again;
        those under a lease no longer ours are logged."""
        if not self._taken:
            return
        reply = replies[0]
        if isinstance(reply, rexc.NoScriptError):
            try:
                with redis_errors("XACK"):
                    reply = await run_script(
                        self._client, _scripts.ACK_MANY, self._keys, self._args
                    )
            except TransportError as exc:
                reply = exc
        if isinstance(reply, Exception):
            log.warning("ack_failed", reason=str(reply))
            self.give_back()
            return
        for (shard, entries), result in zip(self._taken, reply, strict=True):
            if result == -1:
                log.warning("ack_fenced_off", shard=shard.number, entries=len(entries))
