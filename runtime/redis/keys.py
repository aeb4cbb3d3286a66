"""Every Redis key actormem uses, in one place, under one prefix.

Per-shard keys carry the shard's Redis Cluster hash tag (``am:{s17}:...``), so a
shard's stream, its lease and the state of every actor on it hash to one slot:
a state write and the XACK of the command that caused it can be one Lua call, in
Cluster too. Keys that belong to no shard (reply streams, the broadcast stream,
the worker registry) have tags of their own.

Layout (prefix ``am``)::

    am:{s17}:stream              the shard's command stream (consumer group "workers")
    am:{s17}:lease               "<token>:<worker>" of the shard's owner, with a TTL
    am:{s17}:fence               the shard's fencing counter (INCR per lease taken)
    am:{s17}:agent:<addr>:log    an actor's append-only log (a list)
    am:{s17}:agent:<addr>:snap   the rest of an actor's state (a string)
    am:{s17}:agent:<addr>:done   command ids the actor applied (zset by time)
    am:{s17}:agent:<addr>:reply:<id>  the reply to an ask it applied (with a TTL)
    am:{s17}:due                 actors' due times (zset: address -> wall-clock time)
    am:{s17}:unsent              tells of stored commands not yet written (hash: tell id -> record)
    am:{bcast}:stream            the broadcast stream every worker reads
    am:{dlq}:stream              dead letters, with the reason
    am:{workers}                 live workers (zset: worker id -> expiry ms)
    am:{workers}:starts:<worker> starts under one worker id within the last lease
    am:{workers}:counters:<worker>  what a worker handled, failed and dead-lettered (hash)
    am:{workers}:counted         workers with counters (zset: worker id -> their expiry ms)
    am:{r:<client>}:replies      one client's reply stream
    am:{r:<worker>}:wake         a worker's wake-up stream (cuts its shared shard read short)

The ``agent`` segment names the state of any actor: it is part of the stored
layout, which a new name would leave unreadable. An actor's three keys expire when
its changes ask for it (``DurableChanges.expire_after``), and go when it is erased.
"""

from __future__ import annotations

import re
import zlib
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ("CONSUMER_GROUP", "DEFAULT_PREFIX", "Keys", "shard_of")

DEFAULT_PREFIX: Final = "am"
_GLOB: Final = re.compile(r"[\\*?\[\]]")
#: The consumer group every shard stream is read through.
CONSUMER_GROUP: Final = "workers"


def shard_of(address: str, shards: int) -> int:
    """Return the shard an actor address lives on (stable across processes and runs).

    CRC-32 of the UTF-8 address, modulo ``shards``: Python's ``hash`` is salted per
    process, so it cannot be used.

    Raises:
        ValueError: ``shards`` is not positive.
    """
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    return zlib.crc32(address.encode()) % shards


class Keys:
    """Key names under one prefix.

    Args:
        prefix: the first part of every key (no ``{`` or ``}``, which are hash tags).

    Raises:
        ValueError: the prefix is empty or holds a brace.
    """

    __slots__ = ("prefix",)

    def __init__(self, prefix: str = DEFAULT_PREFIX) -> None:
        if not prefix or "{" in prefix or "}" in prefix:
            raise ValueError(f"a key prefix is non-empty and has no braces, got {prefix!r}")
        self.prefix = prefix

    def __repr__(self) -> str:
        return f"Keys({self.prefix!r})"

    def tag(self, shard: int) -> str:
        """The common start of a shard's keys: ``am:{s17}``."""
        return f"{self.prefix}:{{s{shard}}}"

    def stream(self, shard: int) -> str:
        """The shard's command stream."""
        return f"{self.tag(shard)}:stream"

    def lease(self, shard: int) -> str:
        """The shard's lease (owner and fencing token, expiring)."""
        return f"{self.tag(shard)}:lease"

    def fence(self, shard: int) -> str:
        """The shard's fencing counter."""
        return f"{self.tag(shard)}:fence"

    def actor_log(self, shard: int, address: str) -> str:
        """An actor's append-only log."""
        return f"{self.tag(shard)}:agent:{address}:log"

    def actor_snapshot(self, shard: int, address: str) -> str:
        """An actor's snapshot (everything but the append-only log)."""
        return f"{self.tag(shard)}:agent:{address}:snap"

    def actor_applied(self, shard: int, address: str) -> str:
        """Command ids an actor has applied (zset scored by the id's time)."""
        return f"{self.tag(shard)}:agent:{address}:done"

    def actor_state(self, shard: int, address: str) -> tuple[str, str, str]:
        """An actor's log, snapshot and applied ids (:meth:`actor_log`,
        :meth:`actor_snapshot`, :meth:`actor_applied`), named at once."""
        log, snapshot, applied = self.actor_states(shard, (address,))
        return log, snapshot, applied

    def actor_states(self, shard: int, addresses: Iterable[str]) -> list[str]:
        """:meth:`actor_state` of each of ``addresses`` of one shard, in one list."""
        tag = f"{self.tag(shard)}:agent:"
        names: list[str] = []
        for address in addresses:
            agent = tag + address
            names += (f"{agent}:log", f"{agent}:snap", f"{agent}:done")
        return names

    def reply(self, shard: int, address: str, command: str) -> str:
        """The reply kept for command ``command`` applied by the actor at ``address``."""
        return f"{self.tag(shard)}:agent:{address}:reply:{command}"

    def due(self, shard: int) -> str:
        """When the actors of a shard are next due (``DurableChanges.due_at``)."""
        return f"{self.tag(shard)}:due"

    def unsent(self, shard: int) -> str:
        """The tells sent by the shard's stored commands that the outbox had not
        written when they were stored (a hash: tell id -> record)."""
        return f"{self.tag(shard)}:unsent"

    def attempts(self, shard: int, entry: str) -> str:
        """How often handling a redelivered entry started (expiring counter)."""
        return f"{self.tag(shard)}:try:{entry}"

    def broadcast(self) -> str:
        """The broadcast stream every worker reads."""
        return f"{self.prefix}:{{bcast}}:stream"

    def dead_letters(self) -> str:
        """The dead-letter stream."""
        return f"{self.prefix}:{{dlq}}:stream"

    def dead_letter_index(self) -> str:
        """The entries already in the dead-letter stream (``<stream> <entry>``), so
        that writing one again adds no second copy."""
        return f"{self.prefix}:{{dlq}}:seen"

    def workers(self) -> str:
        """The registry of live workers."""
        return f"{self.prefix}:{{workers}}"

    def worker_starts(self, worker: str) -> str:
        """How often a worker id was started within the last lease (an expiring counter)."""
        return f"{self.workers()}:starts:{worker}"

    def worker_counters(self, worker: str) -> str:
        """A worker's counters since its start (a hash it rewrites every second)."""
        return f"{self.workers()}:counters:{worker}"

    def counted_workers(self) -> str:
        """The workers whose counters are kept (zset: worker id -> their expiry, ms)."""
        return f"{self.workers()}:counted"

    def replies(self, client: str) -> str:
        """One client's reply stream."""
        return f"{self.prefix}:{{r:{client}}}:replies"

    def wake(self, worker: str) -> str:
        """A worker's wake-up stream: an entry added to it ends the worker's blocking
        read of its shards (see ``_shared_read``)."""
        return f"{self.prefix}:{{r:{worker}}}:wake"

    def pattern(self) -> str:
        """A SCAN pattern matching every key under this prefix (and nothing else: the
        prefix's own glob characters are escaped)."""
        return _GLOB.sub(r"\\\g<0>", self.prefix) + ":*"
