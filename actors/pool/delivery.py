"""Telling insights to subscribed agents' memories without ever blocking the pool.

A memory actor may be asking the pool at the very moment the pool tells it an
insight, so the pool never waits on a full mailbox: an agent whose mailbox is
full gets its deliveries, in order, from a background task, and the outcome
comes back to the pool (a :class:`DeliveryOutcome` it sends itself) for its counters.
Past ``max_deferred_deliveries`` waiting at once, a delivery fails, counted and
logged.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import structlog

from actormem.actors.metrics import ActorCounts
from actormem.actors.pool.commands import DeliveryOutcome
from actormem.actors.pool.config import PoolConfig
from actormem.actors.pool.insights import InsightDelivery
from actormem.runtime import ActorContext
from actormem.runtime.errors import ActorError, MailboxFullError, RuntimeClosedError

__all__ = ("Deliveries",)

log = structlog.get_logger("actormem.pool")


class Deliveries:
    """The pool's deliveries to ``<memory_kind>/<agent>``, with their backlogs.

    Args:
        ctx: the pool actor's context.
        config: the memory kind and the most deliveries deferred at once.
        counts: the runtime's counts, which deliveries and failures add to.

    Attributes:
        delivered: deliveries told.
        failed: deliveries lost (the agent is gone, or too many were deferred).
        deferred: deliveries waiting on full mailboxes now.
    """

    __slots__ = ("_backlog", "_config", "_counts", "_ctx", "deferred", "delivered", "failed")

    def __init__(
        self, ctx: ActorContext, config: PoolConfig, counts: ActorCounts | None = None
    ) -> None:
        self._ctx = ctx
        self._counts = counts or ActorCounts()
        self._config = config
        self._backlog: dict[str, deque[InsightDelivery]] = {}
        self.deferred = 0
        self.delivered = 0
        self.failed = 0

    def _told(self, n: int) -> None:
        self.delivered += n
        self._counts.pool_deliveries += n

    def _lost(self, n: int) -> None:
        self.failed += n
        self._counts.pool_delivery_failures += n

    def deliver(self, agent: str, delivery: InsightDelivery) -> None:
        """Tell ``delivery`` to ``agent``'s memory now, or after what waits for it."""
        backlog = self._backlog.get(agent)
        if backlog is not None:
            # Behind the deliveries already waiting, so the agent gets them in order.
            self._defer(agent, backlog, delivery)
            return
        try:
            # As the pool: a memory takes insights from nobody else.
            self._ctx.tell_nowait(f"{self._config.memory_kind}/{agent}", delivery)
        except MailboxFullError:
            backlog = self._backlog[agent] = deque()
            self._defer(agent, backlog, delivery)
            self._start_drain(agent, backlog)
        except (ActorError, RuntimeClosedError) as exc:
            self._lost(1)
            log.warning(
                "insight_delivery_failed", agent=agent, insight=delivery.insight.id, reason=str(exc)
            )
        else:
            self._told(1)

    def _defer(
        self, agent: str, backlog: deque[InsightDelivery], delivery: InsightDelivery
    ) -> None:
        if self.deferred >= self._config.max_deferred_deliveries:
            self._lost(1)
            log.warning(
                "insight_delivery_failed",
                agent=agent,
                insight=delivery.insight.id,
                reason=f"mailbox full and {self.deferred} deliveries already deferred",
            )
            return
        backlog.append(delivery)
        self.deferred += 1

    def _start_drain(self, agent: str, backlog: deque[InsightDelivery]) -> None:
        """Tell ``backlog`` to the agent in order, waiting for mailbox space, in the background.

        The drain only pops from ``backlog``; the pool only appends to it and
        forgets it when a :class:`DeliveryOutcome` finds it empty, so no delivery
        is left behind between the drain's end and the outcome.
        """
        address = f"{self._config.memory_kind}/{agent}"
        ctx = self._ctx
        sent = [0]

        async def drain() -> None:
            while backlog:
                await ctx.tell(address, backlog[0])
                backlog.popleft()
                sent[0] += 1

        def outcome(_: Any, error: BaseException | None) -> DeliveryOutcome:
            # Told as the pool (a pipe's sender is its actor): the pool takes it
            # from nobody else, so nobody else can make it drop a backlog.
            return DeliveryOutcome(
                agent=agent, delivered=sent[0], error=None if error is None else str(error)
            )

        self._ctx.pipe(drain, wrap=outcome)

    def drained(self, outcome: DeliveryOutcome) -> None:
        """Count a drain's outcome; drain again what arrived after it ended."""
        self._told(outcome.delivered)
        self.deferred = max(0, self.deferred - outcome.delivered)
        backlog = self._backlog.get(outcome.agent)
        if backlog is None:
            return
        if outcome.error is not None:
            lost = len(backlog)
            self._lost(lost)
            self.deferred = max(0, self.deferred - lost)
            backlog.clear()
            del self._backlog[outcome.agent]
            log.warning(
                "insight_delivery_failed", agent=outcome.agent, count=lost, reason=outcome.error
            )
        elif backlog:
            self._start_drain(outcome.agent, backlog)  # more arrived after the drain ended
        else:
            del self._backlog[outcome.agent]
