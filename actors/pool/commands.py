"""The insight pool's commands and replies (see :mod:`actormem.actors.pool.actor` for what they do).

Every command is a :class:`~actormem.runtime.Command` (a frozen, tagged msgspec
Struct) whose type argument is the type of its reply, so ``ask`` returns that type
and a transport can encode the command and decode the answer.
Wire compatibility: new fields go last, with defaults; a field's type never changes.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

import msgspec

from actormem.actors.errors import MemoryInputError
from actormem.actors.pool.insights import Insight
from actormem.runtime import Command
from actormem.runtime.ids import new_id

__all__ = (
    "DEFAULT_QUERY_K",
    "WILDCARD",
    "AgentCommand",
    "DeliveryOutcome",
    "GetPoolStats",
    "PoolCommand",
    "PoolStats",
    "QueryInsights",
    "RegisterFact",
    "Share",
    "ShareResult",
    "Subscribe",
    "SubscriptionState",
    "Unsubscribe",
)

#: In Subscribe / Unsubscribe / QueryInsights: every topic.
WILDCARD: Final = "*"
DEFAULT_QUERY_K: Final = 5


class ShareResult(msgspec.Struct, frozen=True, kw_only=True):
    """The pool's answer to :class:`Share`.

    Attributes:
        status: ``new``, ``duplicate`` (same words) or ``near_duplicate``.
        insight: the stored insight, or the one this share duplicates.
        similarity: 1.0 for new and exact duplicates, the Jaccard similarity otherwise.
        recipients: agents the new insight is being delivered to (0 for duplicates).
    """

    status: Literal["new", "duplicate", "near_duplicate"]
    insight: Insight
    similarity: float = 1.0
    recipients: int = 0


class SubscriptionState(msgspec.Struct, frozen=True, kw_only=True):
    """An agent's subscriptions after a change.

    Attributes:
        agent: the agent.
        all_topics: subscribed with ``*``.
        topics: topics subscribed by name.
        excluded: topics unsubscribed by name while subscribed to ``*``.
    """

    agent: str
    all_topics: bool
    topics: tuple[str, ...]
    excluded: tuple[str, ...]


class PoolStats(msgspec.Struct, frozen=True, kw_only=True):
    """The pool's counters.

    Attributes:
        shared: shares stored as new insights.
        deduplicated: shares dropped as exact or near duplicates.
        near_duplicates: of those, the near (not exact) ones.
        delivered: deliveries that reached a memory actor's mailbox.
        failed_deliveries: deliveries that could not be made (logged each).
        rejected: shares refused as invalid, and commands refused for want of
            a valid voucher.
        evicted: insights dropped by per-topic limits.
        insights: insights held now.
        topics: topics held now.
        agents: agents the pool knows (ever subscribed).
    """

    shared: int
    deduplicated: int
    near_duplicates: int
    delivered: int
    failed_deliveries: int
    rejected: int
    evicted: int
    insights: int
    topics: int
    agents: int


class Share(Command[ShareResult], frozen=True, kw_only=True):
    """Share an insight on a topic; replies :class:`ShareResult`.

    Args:
        text: the insight (sanitized and cut to ``max_insight_chars``).
        source: the sharing agent.
        topic: the topic (case-insensitive; not ``*``).
        importance: 0..1.
        source_message_ids: ids of the messages it came from.
        id: the command's id; a redelivered command returns its first result.
        voucher: set by ``memory/<source>`` (:class:`~actormem.actors.memory.commands.Vouch`);
            the pool refuses the command without a valid one.
    """

    text: str
    source: str
    topic: str = "general"
    importance: float = 0.5
    source_message_ids: tuple[str, ...] = ()
    id: str = msgspec.field(default_factory=new_id)
    voucher: str | None = None


class RegisterFact(Command[ShareResult], frozen=True, kw_only=True):
    """Register a fact that every known agent receives (the facts topic).

    Replies :class:`ShareResult`. Vouched for like :class:`Share`.
    """

    text: str
    source: str
    importance: float = 1.0
    source_message_ids: tuple[str, ...] = ()
    id: str = msgspec.field(default_factory=new_id)
    voucher: str | None = None


class Subscribe(Command[SubscriptionState], frozen=True, kw_only=True):
    """Subscribe ``agent`` to topics (``*``, the default, means all).

    Replies :class:`SubscriptionState`.

    An empty ``topics`` only makes the agent known (it then gets facts).
    ``backfill`` > 0 also delivers up to that many of the best insights already
    held on the new topics. Vouched for by ``memory/<agent>`` like :class:`Share`.
    """

    agent: str
    topics: tuple[str, ...] = (WILDCARD,)
    backfill: int = 0
    voucher: str | None = None


class Unsubscribe(Command[SubscriptionState], frozen=True, kw_only=True):
    """Unsubscribe ``agent`` from topics; ``*`` (the default) drops every subscription.

    Unsubscribing a named topic while subscribed to ``*`` excludes that topic.
    Replies :class:`SubscriptionState`. Vouched for like :class:`Subscribe`.
    """

    agent: str
    topics: tuple[str, ...] = (WILDCARD,)
    voucher: str | None = None


class QueryInsights(Command[tuple[Insight, ...]], frozen=True, kw_only=True):
    """Return up to ``k`` insights of ``topic`` (``*`` = all topics), best first.

    With ``query``, ranked by BM25 relevance to it, then importance; without, by
    importance, then newest. Replies ``tuple[Insight, ...]``.
    """

    topic: str = WILDCARD
    k: int = DEFAULT_QUERY_K
    query: str | None = None

    def __post_init__(self) -> None:
        # The pool checks topic and k itself; a query that is not text would crash it.
        if self.query is not None and not isinstance(self.query, str):
            raise MemoryInputError(
                f"insights: query must be a string or None, got {type(self.query).__name__}"
            )


class GetPoolStats(Command[PoolStats], frozen=True):
    """Return the pool's counters as :class:`PoolStats`."""


class DeliveryOutcome(Command[None], frozen=True, kw_only=True):
    """Internal: a background drain of an agent's deferred deliveries ended.

    The pool tells itself this. ``delivered`` reached the mailbox; ``error``
    says why the drain stopped early, if it did. The pool vouches for it and
    refuses one it did not make.
    """

    agent: str
    delivered: int
    error: str | None = None
    voucher: str | None = None


#: The commands that act for an agent: the pool takes them only vouched for by
#: that agent's memory actor (see :mod:`actormem.actors.pool.vouch`).
AgentCommand = Share | RegisterFact | Subscribe | Unsubscribe

PoolCommand = (
    Share | RegisterFact | Subscribe | Unsubscribe | QueryInsights | GetPoolStats | DeliveryOutcome
)

# A command over Redis may come from any client: one whose fields fail validation
# on arrival is answered with MemoryInputError (see actormem.runtime.redis.codec).
for _command in get_args(PoolCommand):
    setattr(_command, "input_error", MemoryInputError)  # noqa: B010
