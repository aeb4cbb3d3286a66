"""Due times: when an actor is next to be looked at, kept with its state.

An actor's changes may set a due time (``DurableChanges.due_at``: an agent's
expiry, say). It is kept per shard, in a sorted set of actor addresses scored by
wall-clock time (``Keys.due``), written after the commit that stored the
changes, so that whichever worker owns the shard when the time comes finds the
actor, even after the worker that served it died: :meth:`DueTimes.take` returns
the actors due on the shards owned here and moves each one's due time on by a
retry interval, so an actor whose reminder was lost (its worker died before
sending it) is found again then, and one that sets no new time is not found at
every look. A deleted snapshot (an erased actor) removes its due time.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final

from actormem.runtime.redis._client import eval_pipelined, redis_errors
from actormem.runtime.state import DurableChanges

if TYPE_CHECKING:
    from actormem.runtime.redis._shards import Holdings, Link

__all__ = ("DueTimes", "latest_due")

#: Actors returned per shard and look, at most.
_TAKE_LIMIT: Final = 500

#: KEYS: the due set. ARGV: now, the next due time of what is taken, the address
#: prefix (``kind/``), the most taken. Returns the addresses taken.
_TAKE: Final = """
local found = redis.call('ZRANGE', KEYS[1], '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0, ARGV[4])
local taken = {}
for _, address in ipairs(found) do
  if string.sub(address, 1, #ARGV[3]) == ARGV[3] then
    redis.call('ZADD', KEYS[1], ARGV[2], address)
    taken[#taken + 1] = address
  end
end
return taken
"""

#: What ``latest_due`` returns for an actor whose due time goes.
REMOVE: Final = -1.0


def latest_due(changes: Iterable[DurableChanges]) -> float | None:
    """The due time a batch of one actor's changes (in order) leaves: None when none
    of them touches it, :data:`REMOVE` when it goes (a deleted snapshot, or a due
    time of 0 or less), else the time."""
    due: float | None = None
    for change in changes:
        if change.erase and change.snapshot == b"":
            due = REMOVE
        if change.due_at is not None:
            due = change.due_at if change.due_at > 0 else REMOVE
    return due


class DueTimes:
    """The due sets of the shards owned here.

    Args:
        link: the transport.
        held: the shards this worker owns.
    """

    def __init__(self, link: Link, held: Holdings) -> None:
        self._link = link
        self._held = held
        self._keys = link.keys

    def write(self, pipe: Any, shard: int, due: dict[str, float]) -> None:
        """Queue on ``pipe`` the due times ``due`` (address -> time, or REMOVE)."""
        key = self._keys.due(shard)
        gone = [a for a, t in due.items() if t == REMOVE]
        kept = {a: t for a, t in due.items() if t != REMOVE}
        if gone:
            pipe.zrem(key, *gone)
        if kept:
            pipe.zadd(key, kept)

    async def take(self, kind: str, retry_after: float) -> list[str]:
        """The actors of ``kind`` whose due time passed, on the shards owned here; each
        one's due time moves ``retry_after`` seconds on.

        Raises:
            TransportError: Redis is away or failed.
        """
        shards = sorted(self._held.shards)
        if not shards:
            return []
        now = time.time()
        args = [f"{now:.6f}", f"{now + retry_after:.6f}", f"{kind}/", _TAKE_LIMIT]
        calls = [([self._keys.due(s)], args) for s in shards]
        taken: list[str] = []
        with redis_errors("reading the due actors"):
            for result in await eval_pipelined(self._link.client, _TAKE, calls):
                if isinstance(result, Exception):
                    raise result
                taken += [a.decode() if isinstance(a, bytes) else str(a) for a in result]
        return taken
