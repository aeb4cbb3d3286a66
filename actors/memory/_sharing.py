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

        The pool records this agent as the source, since its memory actor sends the
        share. It drops exact and near duplicates and keeps per-topic limits.

        Args:
            insight: the text to share.
            topic: the topic subscribers follow.
            importance: 0..1, for ranking.
            source_message_ids: the ids of the messages the insight came from.

        Returns:
            The insight's id, and whether it was new or a duplicate.

        Raises:
            MemoryInputError: an empty text, or a topic, importance or provenance
                that is invalid (named).
            AskTimeoutError: no reply within the handle's timeout.
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
        """Register a fact every agent the pool knows receives.

        Args:
            fact: the fact's text.
            importance: 0..1, for ranking.

        Returns:
            The fact's insight id, and whether it was new.

        Raises:
            MemoryInputError: an empty text or an importance out of range.
            AskTimeoutError: no reply within the handle's timeout.
        """
        return await self._as_agent(
            RegisterFact(text=fact, source=self.agent, importance=importance)
        )

    async def subscribe(self, *topics: str, follows: Sequence[str] = ()) -> SubscriptionState:
        """Receive the pool's insights on these topics.

        Args:
            *topics: the topics; ``*``, the default, is every topic.
            follows: agents whose insights rank higher in this agent's feed (with
                ``[pool] delivery = "feed"``).

        Returns:
            The agent's subscriptions now.

        Raises:
            MemoryInputError: ``follows`` is one string, or a topic is invalid.
            AskTimeoutError: no reply within the handle's timeout.
        """
        if isinstance(follows, str):
            raise MemoryInputError("follows must be a list of agent names, not one string")
        return await self._as_agent(
            Subscribe(agent=self.agent, topics=topics or ("*",), follows=tuple(follows))
        )

    async def unsubscribe(self, *topics: str) -> SubscriptionState:
        """Stop receiving these topics.

        Args:
            *topics: the topics; ``*``, the default, is all of them.

        Returns:
            The agent's subscriptions now.

        Raises:
            MemoryInputError: a topic is invalid.
            AskTimeoutError: no reply within the handle's timeout.
        """
        return await self._as_agent(Unsubscribe(agent=self.agent, topics=topics or ("*",)))

    async def forget_shares(self) -> int:
        """Remove the text of every insight this agent shared.

        The text goes from the pool and from the memories it reached; their
        provenance stays. The agent's subscriptions and delivery cursor go too.

        Returns:
            How many insights lost their text.

        Raises:
            AskTimeoutError: no reply within the handle's timeout.
        """
        return await self._as_agent(ForgetSource(source=self.agent))

    async def insights(self, topic: str = "*", k: int = 5) -> list[Insight]:
        """The pool's most important insights on ``topic``.

        Args:
            topic: a topic; ``*``, the default, is every topic.
            k: at most this many, at least 1.

        Returns:
            The insights, most important first.

        Raises:
            MemoryInputError: ``k`` below 1 or a topic that is invalid.
            AskTimeoutError: no reply within the handle's timeout.
        """
        found = await self._ask_pool(QueryInsights(topic=topic, k=k))
        return list(found)

    async def held_insights(self, query: str | None = None, k: int = 10) -> list[Insight]:
        """The insights this agent received.

        Args:
            query: rank them by relevance to this text (newest first without it).
            k: at most this many, at least 1.

        Returns:
            The insights, best first.

        Raises:
            MemoryInputError: ``k`` below 1.
            AskTimeoutError: no reply within the handle's timeout.
        """
        return await self._ask(HeldInsights(query=query, k=k))
