"""A memory handle's insight-pool operations: share, register facts, subscribe,
and read the insights held; each pool command that acts for the agent goes
through its memory actor, which the pool trusts as the sender.
"""

from __future__ import annotations

from collections.abc import Sequence

from actormem.actors.errors import MemoryInputError
from actormem.actors.memory._handle_base import HandleBase
from actormem.actors.memory.commands import (
    HeldInsights,
)
from actormem.actors.pool.commands import (
    ForgetSource,
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

        The pool records this agent as the source (its memory actor sends the
        share), drops exact and near duplicates and keeps per-topic limits.
        """
        return await self._as_agent(
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

    async def register_fact(self, fact: str, importance: float = 1.0) -> ShareResult:
        """Register a fact every agent the pool knows receives (MARSYS's coordinated facts)."""
        return await self._as_agent(
            RegisterFact(text=fact, source=self.agent, importance=importance)
        )

    async def subscribe(self, *topics: str, follows: Sequence[str] = ()) -> SubscriptionState:
        """Receive the pool's insights on these topics (``*``, the default, is every topic).

        ``follows``: agents whose insights rank higher in this agent's feed (its
        relations; with ``[pool] delivery = "feed"``).
        """
        if isinstance(follows, str):
            raise MemoryInputError("follows must be a list of agent names, not one string")
        return await self._as_agent(
            Subscribe(agent=self.agent, topics=topics or ("*",), follows=tuple(follows))
        )

    async def unsubscribe(self, *topics: str) -> SubscriptionState:
        """Stop receiving these topics (``*``, the default, is all of them)."""
        return await self._as_agent(Unsubscribe(agent=self.agent, topics=topics or ("*",)))

    async def forget_shares(self) -> int:
        """Remove the text of every insight this agent shared from the pool and from
        the memories it reached (their provenance stays), and drop its subscriptions
        and delivery cursor; return how many insights lost their text."""
        return await self._as_agent(ForgetSource(source=self.agent))

    async def insights(self, topic: str = "*", k: int = 5) -> list[Insight]:
        """The pool's most important insights on ``topic`` (every topic by default)."""
        found = await self._ask_pool(QueryInsights(topic=topic, k=k))
        return list(found)

    async def held_insights(self, query: str | None = None, k: int = 10) -> list[Insight]:
        """The insights this agent received, most relevant to ``query`` first."""
        return await self._ask(HeldInsights(query=query, k=k))
