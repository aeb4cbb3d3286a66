"""How a run's model calls share one endpoint: they slow down together.

A :class:`Pacing` holds what all the calls of a run share:

- the bound on requests in flight (``max_in_flight``): a 429 halves it (once per
  round of requests: a 429 to a request sent before the last cut cuts no more),
  and every ``bound`` answers raise it by one, back up to ``max_in_flight``;
- a pause: a 429 with ``Retry-After`` holds every new request until then;
- the run's retry budget (``retry_budget``): each retry of any call spends one.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
import structlog

__all__ = ("Pacing",)

log = structlog.get_logger("actormem.simulation")


class Pacing:
    """The in-flight bound, the pause and the retry budget of a run's model calls.

    Args:
        max_in_flight: the most requests in flight at once.
        retry_budget: the retries the run may spend.
        clock: seconds, monotonic (for tests).

    Attributes:
        max_in_flight: the bound the in-flight limit goes back up to.
        retries_left: the retries the run may still spend.
    """

    def __init__(
        self,
        max_in_flight: int,
        retry_budget: int,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_in_flight = max_in_flight
        self.retries_left = retry_budget
        self._clock = clock
        self._limiter = anyio.CapacityLimiter(max_in_flight)
        self._resume_at = 0.0
        self._cut_at = float("-inf")
        self._answers = 0

    @property
    def in_flight_limit(self) -> int:
        """The requests allowed in flight now (``max_in_flight`` until a 429)."""
        return int(self._limiter.total_tokens)

    @property
    def paused_for(self) -> float:
        """Seconds until new requests may go (0: they may now)."""
        return max(0.0, self._resume_at - self._clock())

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[float]:
        """Hold a place in flight for one request, once any pause is over; yield
        the time it goes (for :meth:`rate_limited`)."""
        async with self._limiter:
            # A deadline, which another 429 may push later while this one sleeps.
            while (wait := self.paused_for) > 0:  # noqa: ASYNC110
                await anyio.sleep(wait)
            yield self._clock()

    def answered(self) -> None:
        """A request was answered: the limit grows by one every ``limit`` answers."""
        limit = self.in_flight_limit
        if limit >= self.max_in_flight:
            return
        self._answers += 1
        if self._answers >= limit:
            self._answers = 0
            self._limiter.total_tokens = limit + 1

    def rate_limited(self, sent_at: float, pause: float | None) -> None:
        """A request sent at ``sent_at`` got a 429 asking for a ``pause`` (seconds;
        None: the answer named none): pause every request, and halve the limit
        unless it was cut after this request went."""
        now = self._clock()
        if pause:
            self._resume_at = max(self._resume_at, now + pause)
        if sent_at <= self._cut_at:
            return
        limit = self.in_flight_limit
        self._cut_at = now
        self._answers = 0
        if limit > 1:
            self._limiter.total_tokens = limit // 2
            log.debug("llm_in_flight_cut", limit=limit // 2, pause_s=pause or 0.0)

    def spend_retry(self) -> bool:
        """Take one retry from the budget; False when none is left."""
        if self.retries_left <= 0:
            return False
        self.retries_left -= 1
        return True
