"""A memory handle's insight-pool operations: share, register facts, subscribe,
and read the insights held; the memory actor vouches for each pool command.
"""

from __future__ import annotations

from collections.abc import Sequence

from actormem.actors.memory._handle_base import HandleBase
from actormem.actors.memory.commands import (
    HeldInsights,
)
from actormem.actors.pool.commands import (
    QueryInsights,
    RegisterFact,
    Share,
    ShareResult,
    Subscribe,
    SubscriptionState,
    Unsubscribe,
)
from actormem.actors.pool.insights import Insight

__all__ = ("SharingOps",)


class SharingOps(HandleBase):
    """The insight pool, seen from one agent."""

    __slots__ = ()

    async def share(
        self,
        insight: str,
        topic: str = "general",
        importance: float = 0.5,
        *,
        source_message_ids: Sequence[str] = (),
    ) -> ShareResult:
        """Share what this agent learned; the pool sends it to the topic's subscribers.

        The pool records this agent as the source (vouched for by its memory
        actor), drops exact and near duplicates and keeps per-topic limits.
        """
        vouched = await self._vouched(
            Share(
                text=insight,
                source=self.agent,
                topic=topic,
                importance=importance,
                source_message_ids=(
                    tuple(source_message_ids)
                    if isinstance(source_message_ids, list | tuple)
                    else source_message_ids  # type: ignore[arg-type]  # refused in _ask
                ),
            )
        )
        return await self._ask_pool(vouched)

    async def register_fact(self, fact: str, importance: float = 1.0) -> ShareResult:
        """Register a fact every agent the pool knows receives (MARSYS's coordinated facts)."""
        vouched = await self._vouched(
            RegisterFact(text=fact, source=self.agent, importance=importance)
        )
        return await self._ask_pool(vouched)

    async def subscribe(self, *topics: str) -> SubscriptionState:
        """Receive the pool's insights on these topics (``*``, the default, is every topic)."""
        vouched = await self._vouched(Subscribe(agent=self.agent, topics=topics or ("*",)))
        return await self._ask_pool(vouched)

    async def unsubscribe(self, *topics: str) -> SubscriptionState:
        """Stop receiving these topics (``*``, the default, is all of them)."""
        vouched = await self._vouched(Unsubscribe(agent=self.agent, topics=topics or ("*",)))
        return await self._ask_pool(vouched)

    async def insights(self, topic: str = "*", k: int = 5) -> list[Insight]:
        """The pool's most important insights on ``topic`` (every topic by default)."""
        found = await self._ask_pool(QueryInsights(topic=topic, k=k))
        return list(found)

    async def held_insights(self, query: str | None = None, k: int = 10) -> list[Insight]:
        """The insights this agent received, most relevant to ``query`` first."""
        return await self._ask(HeldInsights(query=query, k=k))
