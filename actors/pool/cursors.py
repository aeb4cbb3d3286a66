"""Delivery cursors: what the pool sent each subscriber, and what it confirmed.

Every delivery gets a number from one pool-wide counter (increasing, never
reused) and names the number of the delivery before it to the same agent, so the
deliveries to one agent form a chain the memory applies in order and once (see
:class:`~actormem.actors.pool.insights.InsightDelivery`). A delivery stays
*pending* until the agent's memory confirms it (:class:`DeliveryAck`); the pending
ones are part of the pool's stored state, so a pool that restarts sends again
what may not have arrived: on activation it asks every agent with pending
deliveries how far it got (the newest pending one, marked ``ack``), and sends the
rest again when the answer says something is missing.

The memory is asked to confirm every ``ack_every``-th delivery, so pending lists
stay short without an answer per delivery; past ``max_pending`` the oldest
pending delivery of an agent is given up (counted, logged).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Final

import msgspec
import structlog

from actormem.actors.pool.insights import Insight, InsightDelivery

__all__ = ("ACK_EVERY", "MAX_PENDING", "Cursor", "Cursors", "PendingDelivery")

log = structlog.get_logger("actormem.pool")

#: A memory confirms every this many deliveries to it.
ACK_EVERY: Final = 16
#: Unconfirmed deliveries kept per agent.
MAX_PENDING: Final = 1_000


class PendingDelivery(msgspec.Struct, frozen=True, kw_only=True):
    """A delivery sent and not confirmed yet."""

    number: int
    after: int
    insight: Insight


class Cursor(msgspec.Struct, kw_only=True):
    """One agent's delivery chain.

    Attributes:
        agent: the agent.
        last: the number of the newest delivery to it (0: none yet).
        acked: its memory confirmed every delivery up to this number.
        unasked: deliveries since the last one that asked for a confirmation.
        pending: the deliveries not confirmed yet, oldest first.
    """

    agent: str
    last: int = 0
    acked: int = 0
    unasked: int = 0
    pending: list[PendingDelivery] = msgspec.field(default_factory=list)


class Cursors:
    """Every agent's delivery chain, and the pool-wide delivery numbering.

    Attributes:
        number: the number of the newest delivery made (to anyone).
        given_up: pending deliveries dropped past ``max_pending``.
    """

    __slots__ = ("_ack_every", "_by_agent", "_max_pending", "given_up", "number")

    def __init__(self, ack_every: int = ACK_EVERY, max_pending: int = MAX_PENDING) -> None:
        self._ack_every = ack_every
        self._max_pending = max_pending
        self._by_agent: dict[str, Cursor] = {}
        self.number = 0
        self.given_up = 0

    def __len__(self) -> int:
        return len(self._by_agent)

    def agents(self) -> list[str]:
        """Every agent with a chain (delivered to, and not forgotten)."""
        return list(self._by_agent)

    def pending(self) -> int:
        """Deliveries not confirmed yet, over every agent."""
        return sum(len(c.pending) for c in self._by_agent.values())

    def next(self, agent: str, insight: Insight, *, last: bool = False) -> InsightDelivery:
        """Number a new delivery of ``insight`` to ``agent`` and keep it pending
        (``last``: the last of a feed, which asks for a confirmation)."""
        cursor = self._by_agent.get(agent)
        if cursor is None:
            cursor = self._by_agent[agent] = Cursor(agent=agent)
        self.number += 1
        pending = PendingDelivery(number=self.number, after=cursor.last, insight=insight)
        cursor.last = self.number
        cursor.pending.append(pending)
        if len(cursor.pending) > self._max_pending:
            lost = cursor.pending.pop(0)
            self.given_up += 1
            log.warning(
                "insight_delivery_failed",
                agent=agent,
                insight=lost.insight.id,
                reason=f"{self._max_pending} deliveries wait for its memory to confirm",
            )
        cursor.unasked += 1
        ask = last or cursor.unasked >= self._ack_every
        if ask:
            cursor.unasked = 0
        delivery = _delivery(pending, ack=ask)
        return msgspec.structs.replace(delivery, feed=True) if last else delivery

    def acked(self, agent: str, through: int) -> None:
        """``agent``'s memory holds its chain up to ``through``: drop what it confirmed."""
        cursor = self._by_agent.get(agent)
        if cursor is None:
            return
        cursor.acked = through
        cursor.pending = [p for p in cursor.pending if p.number > through]

    def resend(self, agent: str, through: int) -> list[InsightDelivery]:
        """The pending deliveries after ``through``, to send again in order.

        The first names ``through`` as the one before it, so a memory that lost
        deliveries for good (given up here) goes on from there; the last asks for a
        confirmation.
        """
        cursor = self._by_agent.get(agent)
        if cursor is None:
            return []
        again = [p for p in cursor.pending if p.number > through]
        out: list[InsightDelivery] = []
        for n, p in enumerate(again):
            first = msgspec.structs.replace(p, after=through) if n == 0 else p
            out.append(_delivery(first, ack=n == len(again) - 1))
        return out

    def probes(self) -> Iterator[tuple[str, InsightDelivery]]:
        """For every agent with pending deliveries, its newest one asking for a
        confirmation: what a restarted pool sends to learn what arrived."""
        for agent, cursor in self._by_agent.items():
            if cursor.pending:
                yield agent, _delivery(cursor.pending[-1], ack=True)

    def erase(self, erased: Iterable[Insight]) -> None:
        """Replace the pending copies of ``erased`` insights by their erased form."""
        by_id = {i.id: i for i in erased}
        if not by_id:
            return
        for cursor in self._by_agent.values():
            cursor.pending = [
                msgspec.structs.replace(p, insight=by_id[p.insight.id])
                if p.insight.id in by_id
                else p
                for p in cursor.pending
            ]

    def drop(self, agent: str) -> None:
        """Forget ``agent``'s chain (the numbering goes on, so no number is reused)."""
        self._by_agent.pop(agent, None)

    def export(self) -> list[Cursor]:
        """Every agent's chain (copies)."""
        return [
            msgspec.structs.replace(c, pending=list(c.pending)) for c in self._by_agent.values()
        ]

    def load(self, number: int, cursors: Iterable[Cursor]) -> None:
        """Replace the chains and the numbering with saved ones."""
        self.number = number
        self._by_agent = {
            c.agent: msgspec.structs.replace(c, pending=list(c.pending)) for c in cursors
        }


def _delivery(pending: PendingDelivery, *, ack: bool) -> InsightDelivery:
    return InsightDelivery(pending.insight, number=pending.number, after=pending.after, ack=ack)
