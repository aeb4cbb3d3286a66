"""Per-agent expiry (``retention.ttl``): an agent idle that long is forgotten.

Three mechanisms, each covering what the one before cannot:

* **Lazily.** Every memory actor knows when it last handled a command of its
  agent (:class:`IdleClock`); a command reaching an agent idle past the TTL finds
  it forgotten first, so it starts empty.
* **A sweeper per process.** :class:`IdleSweeper` (one background task per
  runtime, from its start) tells ``Expire`` to every agent of the process idle
  past the TTL; its memory actor forgets it as ``forget()`` does, erasing the
  stored copies too.
* **Stored due times (Redis).** The stored state of an agent carries the time it
  was last active (rewritten at least every quarter of the TTL while it is used),
  and each snapshot stored sets the agent's due time, ``INEXACT_FACTOR`` TTLs
  after it, in its shard's due set (``DurableChanges.due_at``). The sweeper of
  whichever worker owns the shard then tells the agents due ``Expire(due=True)``
  (``Runtime.take_due``), so an agent whose worker died is forgotten all the same,
  its stream entries, dead letters and shares included.
* **Key expiry (Redis).** The agent's keys expire ``KEY_TTL_FACTOR`` TTLs after its
  last stored change, so its state goes even if no worker looks at it again; a
  worker that comes later still forgets the agent when its due time is found.

A memory activated afresh knows the last activity only from its stored state,
which lags the truth by at most a quarter of the TTL: it waits
``INEXACT_FACTOR`` TTLs from it, so an agent is never forgotten before it was idle
for the TTL, and always before its keys expire.
"""

from __future__ import annotations

import time
from typing import Final

import anyio
import structlog

from actormem.actors.memory.commands import Expire
from actormem.runtime import ActormemError, Runtime, RuntimeClosedError

__all__ = ("INEXACT_FACTOR", "KEY_TTL_FACTOR", "IdleClock", "IdleSweeper")

log = structlog.get_logger("actormem.memory")

#: How stale the stored time of the last activity may be, in TTLs.
STORED_LAG: Final = 0.25
#: The idle time, in TTLs from the stored last activity, after which a memory
#: activated afresh (which knows no later activity) is expired.
INEXACT_FACTOR: Final = 1 + STORED_LAG
#: An agent's Redis keys expire this many TTLs after its last stored change.
KEY_TTL_FACTOR: Final = 1.5
#: The actor kind of the agent memories (as ``register_actors`` registers them).
MEMORY_KIND: Final = "memory"
#: Bounds of the sweeper's period (a quarter of the TTL), in seconds.
_SWEEP_MIN_S: Final = 0.05
_SWEEP_MAX_S: Final = 60.0


class IdleSweeper:
    """Tells ``Expire`` to the agents of one runtime once they are due.

    Args:
        ttl: ``retention.ttl``.
    """

    __slots__ = ("_due", "_running", "ttl")

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._due: dict[str, float] = {}
        self._running = False

    @property
    def period(self) -> float:
        """Seconds between two looks: a quarter of the TTL, within bounds."""
        return min(max(self.ttl * STORED_LAG, _SWEEP_MIN_S), _SWEEP_MAX_S)

    def watch(self, runtime: Runtime, agent: str, due: float) -> None:
        """Expire ``agent`` at ``due`` (wall-clock time) unless watched again before."""
        self._due[agent] = due
        if not self._running:
            try:
                runtime.spawn(self._run, runtime)
            except RuntimeClosedError:
                return
            self._running = True

    def discard(self, agent: str) -> None:
        """Stop watching ``agent`` (it was forgotten)."""
        self._due.pop(agent, None)

    async def run(self, runtime: Runtime) -> None:
        """Look for the agents due every :attr:`period` for as long as ``runtime`` is
        open (``Runtime.on_open``): those watched here, and those whose stored due
        time passed on the shards this process owns."""
        if self._running:
            return
        self._running = True
        await self._run(runtime)

    async def _run(self, runtime: Runtime) -> None:
        period = self.period
        try:
            while True:
                await anyio.sleep(period)
                now = time.time()
                due = [(a, Expire()) for a, t in self._due.items() if t <= now]
                for agent, _ in due:
                    del self._due[agent]
                try:
                    # Told again a TTL later if this Expire is lost (its worker died).
                    stored = await runtime.take_due(MEMORY_KIND, max(self.ttl, period))
                except RuntimeClosedError:
                    return
                except ActormemError as exc:  # found at a later look
                    log.warning("due_agents_not_read", reason=str(exc))
                    stored = []
                due += [(a.partition("/")[2], Expire(due=True)) for a in stored]
                for agent, expire in due:
                    try:
                        await runtime.tell(f"{MEMORY_KIND}/{agent}", expire)
                    except RuntimeClosedError:
                        return
                    except ActormemError as exc:  # watched again on its next command
                        log.warning("expire_not_sent", agent=agent, reason=str(exc))
        finally:
            self._running = False


class IdleClock:
    """When one agent was last active, against ``retention.ttl``.

    Args:
        agent: the agent.
        ttl: ``retention.ttl`` (None: agents never expire; the clock does nothing).
        sweeper: the runtime's sweeper (None without a TTL).

    Attributes:
        active_at: when the agent last had a command (wall-clock time), if known.
        exact: ``active_at`` was seen here, not read from stored state.
        stored_at: the ``active_at`` the stored state holds.
    """

    __slots__ = ("active_at", "agent", "exact", "stored_at", "sweeper", "ttl")

    def __init__(self, agent: str, ttl: float | None, sweeper: IdleSweeper | None) -> None:
        self.agent = agent
        self.ttl = ttl
        self.sweeper = sweeper
        self.active_at: float | None = None
        self.exact = False
        self.stored_at: float | None = None

    @property
    def limit(self) -> float | None:
        """Seconds after ``active_at`` at which the agent expires (None: never)."""
        if self.ttl is None or self.active_at is None:
            return None
        return self.ttl if self.exact else self.ttl * INEXACT_FACTOR

    @property
    def due_at(self) -> float | None:
        """When the agent is due by its stored time of last activity (None: never):
        ``INEXACT_FACTOR`` TTLs after it, what a memory activated afresh waits."""
        if self.ttl is None or self.stored_at is None:
            return None
        return self.stored_at + self.ttl * INEXACT_FACTOR

    @property
    def key_ttl(self) -> float | None:
        """Seconds the agent's stored state lives after its last stored change."""
        return None if self.ttl is None else self.ttl * KEY_TTL_FACTOR

    def expired(self, now: float) -> bool:
        """True when the agent has been idle past its limit at ``now``."""
        limit = self.limit
        return limit is not None and self.active_at is not None and now - self.active_at >= limit

    def touch(self, runtime: Runtime, now: float) -> bool:
        """The agent had a command at ``now``: watch it from then on. Returns True when
        the stored time is too old (the state is then to be stored again)."""
        self.active_at = now
        self.exact = True
        if self.ttl is None:
            return False
        self.watch(runtime)
        return self.stored_at is None or now - self.stored_at >= self.ttl * STORED_LAG

    def watch(self, runtime: Runtime) -> None:
        """Have the sweeper expire the agent when its limit comes."""
        limit = self.limit
        if self.sweeper is not None and limit is not None and self.active_at is not None:
            self.sweeper.watch(runtime, self.agent, self.active_at + limit)

    def restored(self, active_at: float | None) -> None:
        """The agent's state was loaded; ``active_at`` is what it holds."""
        self.active_at = self.stored_at = active_at
        self.exact = False

    def forgotten(self) -> None:
        """The agent was forgotten: nothing is known of it any more."""
        self.active_at = self.stored_at = None
        self.exact = False
        if self.sweeper is not None:
            self.sweeper.discard(self.agent)
