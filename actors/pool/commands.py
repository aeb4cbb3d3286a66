"""The insight pool's commands and replies (see :mod:`actormem.actors.pool.actor` for what they do).

Every command is a :class:`~actormem.runtime.Command` (a frozen, tagged msgspec
Struct) whose type argument is the type of its reply, so ``ask`` returns that type
and a transport can encode the command and decode the answer.
Wire compatibility: new fields go last, with defaults; a field's type never changes.
"""

from __future__ import annotations

import zlib
from typing import Final, Literal, get_args

import msgspec

from actormem.actors.errors import MemoryInputError
from actormem.actors.pool.insights import Insight
from actormem.runtime import Command
from actormem.runtime.ids import new_id

__all__ = (
    "DEFAULT_QUERY_K",
    "POOL_ADDRESS",
    "POOL_KIND",
    "WILDCARD",
    "AgentCommand",
    "DeliveryAck",
    "DeliveryOutcome",
    "FeedTick",
    "ForgetSource",
    "GetPoolStats",
    "PeerForgot",
    "PeerShared",
    "PoolCommand",
    "PoolStats",
    "QueryInsights",
    "RegisterFact",
    "Share",
    "ShareResult",
    "Subscribe",
    "SubscriptionState",
    "Unsubscribe",
    "merged_stats",
    "partition_of",
    "pool_address",
    "pool_addresses",
)

#: In Subscribe / Unsubscribe / QueryInsights: every topic.
WILDCARD: Final = "*"
#: The actor kind the pool is registered as: a memory takes insights only from it.
POOL_KIND: Final = "pool"
#: The pool agents share with.
POOL_ADDRESS: Final = "pool/main"
DEFAULT_QUERY_K: Final = 5


def pool_addresses(partitions: int) -> list[str]:
    """The pool's partitions: ``pool/main``, then ``pool/main-1`` ... ``pool/main-<n-1>``."""
    return [POOL_ADDRESS, *(f"{POOL_ADDRESS}-{i}" for i in range(1, partitions))]


def partition_of(address: str) -> int:
    """The partition number of a pool address (0 for ``pool/main``).

    Raises:
        ValueError: the address is no partition of the pool.
    """
    if address == POOL_ADDRESS:
        return 0
    base, _, number = address.rpartition("-")
    if base != POOL_ADDRESS or not number.isdigit() or number.startswith("0"):
        raise ValueError(f"{address!r} is no partition of {POOL_ADDRESS}")
    return int(number)


def pool_address(agent: str, partitions: int) -> str:
    """The partition serving ``agent``: the same in every process (a stable hash)."""
    if partitions <= 1:
        return POOL_ADDRESS
    n = zlib.crc32(agent.encode("utf-8", "surrogatepass")) % partitions
    return POOL_ADDRESS if n == 0 else f"{POOL_ADDRESS}-{n}"


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
        rejected: shares refused as invalid, and commands refused because they
            did not come from the agent they act for.
        evicted: insights dropped by per-topic limits.
        insights: insights held now.
        topics: topics held now.
        agents: agents the pool knows (ever subscribed).
        pending_deliveries: deliveries their memories have not confirmed yet.
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
    pending_deliveries: int = 0


def merged_stats(parts: list[PoolStats]) -> PoolStats:
    """The counters of a pool's partitions as one: summed, except the insights and
    topics held, which every partition holds a copy of."""
    summed = {
        f: sum(getattr(p, f) for p in parts)
        for f in PoolStats.__struct_fields__
        if f not in ("insights", "topics")
    }
    return PoolStats(
        **summed,
        insights=max((p.insights for p in parts), default=0),
        topics=max((p.topics for p in parts), default=0),
    )


class Share(Command[ShareResult], frozen=True, kw_only=True):
    """Share an insight on a topic; replies :class:`ShareResult`.

    Args:
        text: the insight (sanitized and cut to ``max_insight_chars``).
        source: the sharing agent.
        topic: the topic (case-insensitive; not ``*``).
        importance: 0..1.
        source_message_ids: ids of the messages it came from.
        id: the command's id; a redelivered command returns its first result,
            and a new insight takes it as its own id.

    The pool takes it only from ``memory/<source>`` (the envelope's sender, see
    :class:`~actormem.actors.memory.commands.ToPool`): the handle sends it so.
    """

    text: str
    source: str
    topic: str = "general"
    importance: float = 0.5
    source_message_ids: tuple[str, ...] = ()
    id: str = msgspec.field(default_factory=new_id)

    #: Its reply quotes the insight, which forgetting its source must erase at
    #: once; it comes forwarded from ``ToPool``, whose unanswered asks are sent
    #: again as new commands (answered from the shares applied, by ``id``).
    keep_reply = False


class RegisterFact(Command[ShareResult], frozen=True, kw_only=True):
    """Register a fact that every known agent receives (the facts topic).

    Replies :class:`ShareResult`. Taken only from ``memory/<source>``, like :class:`Share`.
    """

    text: str
    source: str
    importance: float = 1.0
    source_message_ids: tuple[str, ...] = ()
    id: str = msgspec.field(default_factory=new_id)

    #: As :attr:`Share.keep_reply`.
    keep_reply = False


class Subscribe(Command[SubscriptionState], frozen=True, kw_only=True):
    """Subscribe ``agent`` to topics (``*``, the default, means all).

    Replies :class:`SubscriptionState`.

    An empty ``topics`` only makes the agent known (it then gets facts).
    ``backfill`` > 0 also delivers up to that many of the best insights already
    held on the new topics. ``follows``: agents whose insights rank higher in this
    agent's feed (its relations). Taken only from ``memory/<agent>``, like
    :class:`Share`.
    """

    agent: str
    topics: tuple[str, ...] = (WILDCARD,)
    backfill: int = 0
    follows: tuple[str, ...] = ()


class Unsubscribe(Command[SubscriptionState], frozen=True, kw_only=True):
    """Unsubscribe ``agent`` from topics; ``*`` (the default) drops every subscription.

    Unsubscribing a named topic while subscribed to ``*`` excludes that topic.
    Replies :class:`SubscriptionState`. Taken only from ``memory/<agent>``.
    """

    agent: str
    topics: tuple[str, ...] = (WILDCARD,)


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
    says why the drain stopped early, if it did. The pool refuses one it did not
    send itself (the envelope's sender).
    """

    agent: str
    delivered: int
    error: str | None = None


class ForgetSource(Command[int], frozen=True, kw_only=True):
    """Forget what ``source`` shared: the text of each of its insights is removed
    (id, source, topic, importance and time stay, marked ``erased``), its
    subscriptions and delivery cursors are dropped, and that is stored. Each erased
    insight is delivered to every agent the pool delivers to, whose memory drops
    its copy.

    Replies how many insights lost their text. Taken only from ``memory/<source>``.
    """

    source: str


class DeliveryAck(Command[None], frozen=True, kw_only=True):
    """``memory/<agent>`` → pool: it holds every delivery of its chain up to
    ``through`` (see :class:`~actormem.actors.pool.insights.InsightDelivery`).

    ``resend``: it got one it could not apply yet (one before it is missing): the
    pool sends again what it has after ``through``. Taken only from the memory
    actor whose agent it names (the envelope's sender).
    """

    through: int
    resend: bool = False
    #: For a feed: the terms of the agent's recent messages, and the agents they name
    #: (what its next feed is ranked by).
    interest: tuple[str, ...] = ()
    talks_to: tuple[str, ...] = ()


class FeedTick(Command[int], frozen=True):
    """Deliver every subscriber's ranked feed now (``delivery = "feed"``); replies
    how many insights went out. With ``delivery = "broadcast"``, does nothing."""


class PeerShared(Command[None], frozen=True, kw_only=True):
    """Internal, pool partition → the others: ``insight`` was stored as new
    (``new``), or shared again. Taken only from a pool partition."""

    insight: Insight
    new: bool = True


class PeerForgot(Command[None], frozen=True, kw_only=True):
    """Internal, pool partition → the others: forget what ``source`` shared
    (see :class:`ForgetSource`). Taken only from a pool partition."""

    source: str


#: The commands that act for an agent: the pool takes them only from that agent's
#: memory actor (the envelope's sender; see :class:`~actormem.actors.memory.commands.ToPool`).
AgentCommand = Share | RegisterFact | Subscribe | Unsubscribe | ForgetSource

PoolCommand = (
    Share
    | RegisterFact
    | Subscribe
    | Unsubscribe
    | ForgetSource
    | QueryInsights
    | GetPoolStats
    | DeliveryOutcome
    | DeliveryAck
    | FeedTick
    | PeerShared
    | PeerForgot
)

# A command over Redis may come from any client: one whose fields fail validation
# on arrival is answered with MemoryInputError (see actormem.runtime.redis.codec).
for _command in get_args(PoolCommand):
    setattr(_command, "input_error", MemoryInputError)  # noqa: B010
