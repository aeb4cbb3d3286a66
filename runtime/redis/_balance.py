"""Shard balancing: what one heartbeat sees of the deployment, and what a worker
does about it.

Each heartbeat a worker reads the registry of workers and every shard's lease
(a :class:`Survey`). Only workers whose last heartbeat is recent (within two
heartbeat intervals) count towards the fair share ``ceil(shards / live)``: a
worker that died stops counting two heartbeats after its last one, before its
leases expire, and a shard given back beyond the share always has a live worker
below its share to take it (a hand-off). A worker below its
share comes back for more just after the moment a shard should free up (an
over-share worker's next heartbeat, a silent worker's lease expiry) instead of a
whole heartbeat later.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Final

__all__ = ("Survey", "holder_of")

#: A worker counts as live while its last heartbeat is this many intervals old at most.
FRESH_INTERVALS: Final = 2
#: How long after a shard should free up a worker below its share looks again (ms).
MARGIN_MS: Final = 100
#: The shortest pause between two rounds of a worker below its share (s).
MIN_ROUND: Final = 0.1


def holder_of(value: str) -> str:
    """The worker id in a lease value ``"<token>:<worker>"``."""
    return value.partition(":")[2]


@dataclass(frozen=True)
class Survey:
    """One heartbeat's view: the registered workers and every shard's lease.

    Attributes:
        now_ms: the wall-clock time of the reading (ms).
        lease_ms: a lease's time to live (a heartbeat is a third of it).
        registered: worker id -> the expiry of its registration (its last
            heartbeat plus ``lease_ms``).
        leases: shard -> lease value, for the shards that have a lease.
        shards: the number of shards.
        expires_in_ms: shard -> the milliseconds its lease has left, where read.
    """

    now_ms: int
    lease_ms: int
    registered: dict[str, int]
    leases: dict[int, str]
    shards: int
    expires_in_ms: dict[int, int] = field(default_factory=dict)
    held: Counter[str] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "held", Counter(holder_of(v) for v in self.leases.values()))

    @property
    def interval_ms(self) -> float:
        """A heartbeat's interval (ms)."""
        return self.lease_ms / 3

    def last_beat(self, worker: str) -> float:
        """When ``worker`` last registered (ms; -inf if it is not registered)."""
        expiry = self.registered.get(worker)
        return -math.inf if expiry is None else expiry - self.lease_ms

    def live(self) -> list[str]:
        """The workers whose last heartbeat is recent."""
        oldest = self.now_ms - FRESH_INTERVALS * self.interval_ms
        return [w for w in self.registered if self.last_beat(w) >= oldest]

    def share(self) -> int:
        """The fair share: ``ceil(shards / live workers)``."""
        return math.ceil(self.shards / max(len(self.live()), 1))

    def free(self) -> list[int]:
        """The shards no lease holds."""
        return [s for s in range(self.shards) if s not in self.leases]

    def surplus(self, owned: int) -> int:
        """How many shards a worker holding ``owned`` gives back: those beyond its share.

        Every shard given back has a taker: the share counts only live workers,
        and the live workers' shares add up to every shard, so while one holds
        more than its share another holds less, and takes the shard in its next
        round.
        """
        return max(owned - self.share(), 0)

    def next_round(self, worker: str, owned: int) -> float:
        """Seconds until ``worker``, holding ``owned``, should run its next round.

        A heartbeat's interval, unless the worker is below its share and a shard
        should free up sooner: a live worker above its share gives shards back at
        its next heartbeat, and the leases of a worker that went silent expire a
        lease after its last heartbeat. The round comes just after that moment.
        """
        interval = self.interval_ms / 1000
        share = self.share()
        if owned >= share:
            return interval
        live = set(self.live())
        moments: list[float] = []
        for holder, count in self.held.items():
            if holder == worker or not count:
                continue
            if holder in live:
                if count > share:
                    moments.append(self.last_beat(holder) + self.interval_ms)
            else:
                # Silent, or gone from the registry: its leases were last renewed
                # with its last heartbeat.
                moments.append(max(self.last_beat(holder) + self.lease_ms, self.now_ms))
        if not moments:
            return interval
        wait = (min(moments) + MARGIN_MS - self.now_ms) / 1000
        return min(max(wait, MIN_ROUND), interval)
