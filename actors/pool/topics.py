"""The insights the pool holds, by topic: deduplicated, bounded, ranked for queries."""

from __future__ import annotations

import heapq
import math
import time
from typing import ClassVar, Final, Literal

import msgspec
import structlog

from actormem.actors.pool.config import PoolConfig
from actormem.actors.pool.insights import Insight, InsightError, InsightSigner
from actormem.actors.text.bm25 import BM25, tokenize
from actormem.actors.text.duplicates import NearDuplicateIndex
from actormem.runtime.ids import new_id

__all__ = (
    "MAX_ID_CHARS",
    "MAX_SOURCE_MESSAGE_IDS",
    "Topics",
    "check_importance",
    "check_message_ids",
)

log = structlog.get_logger("actormem.pool")

MAX_SOURCE_MESSAGE_IDS: Final = 64
#: The longest message id (and agent name) the pool takes.
MAX_ID_CHARS: Final = 128


class _Topic:
    """One topic's insights, its near-duplicate index, and the order they are
    evicted in: least important first, then oldest, then first held."""

    __slots__ = ("_held", "_next", "_order", "index", "insights")

    def __init__(self, config: PoolConfig) -> None:
        self.insights: dict[str, Insight] = {}
        self.index = NearDuplicateIndex(config.near_duplicate_threshold, config.shingle_size)
        # (importance, created, when first held, id); entries of insights since
        # dropped or changed stay until they reach the top.
        self._order: list[tuple[float, float, int, str]] = []
        self._held: dict[str, int] = {}
        self._next = 0

    def hold(self, insight: Insight) -> None:
        """Hold ``insight`` (replacing one of the same id, which keeps its place)."""
        key = insight.id
        seq = self._held.get(key)
        if seq is None:
            seq = self._held[key] = self._next
            self._next += 1
        self.insights[key] = insight
        heapq.heappush(self._order, (insight.importance, insight.created, seq, key))
        if len(self._order) > 2 * len(self.insights) + 64:
            self._order = [e for e in self._order if self._current(e)]
            heapq.heapify(self._order)

    def drop(self, key: str) -> Insight:
        """Stop holding the insight ``key``; return it."""
        self._held.pop(key, None)
        return self.insights.pop(key)

    def weakest(self) -> str:
        """The id of the insight evicted first (the topic holds one at least)."""
        while not self._current(self._order[0]):
            heapq.heappop(self._order)
        return self._order[0][3]

    def _current(self, entry: tuple[float, float, int, str]) -> bool:
        importance, created, seq, key = entry
        held = self.insights.get(key)
        return (
            held is not None
            and self._held.get(key) == seq
            and held.importance == importance
            and held.created == created
        )


class _EmptyTopic:
    insights: ClassVar[dict[str, Insight]] = {}


_EMPTY: Final = _EmptyTopic()


def check_importance(value: float) -> float:
    """Return ``value`` as a float when it is a number within 0..1.

    Raises:
        InsightError: not a number, or out of range.
    """
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise InsightError(f"importance must be a number, got {type(value).__name__}")
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise InsightError(f"importance must be within 0..1, got {value}")
    return float(value)


def check_message_ids(ids: tuple[str, ...] | str) -> tuple[str, ...]:
    """Return ``ids`` as a tuple when it is a short list of message ids.

    Raises:
        InsightError: one string, too many ids, or one that is not an id.
    """
    if isinstance(ids, str):
        raise InsightError("source_message_ids must be a list of ids, not one string")
    if len(ids) > MAX_SOURCE_MESSAGE_IDS:
        raise InsightError(
            f"source_message_ids holds {len(ids)} ids; the limit is {MAX_SOURCE_MESSAGE_IDS}"
        )
    for i in ids:
        if not isinstance(i, str) or not i or len(i) > MAX_ID_CHARS:
            raise InsightError(f"source_message_ids: {i!r} is not a message id")
    return tuple(ids)


class Topics:
    """The pool's insights by topic, each topic with its near-duplicate index.

    Args:
        config: the limits (topics, insights per topic) and duplicate threshold.
        signer: signs new insights and checks loaded ones, when a key is configured.

    Attributes:
        shared: new insights stored.
        deduplicated: shares that duplicated a held insight (exactly or nearly).
        near: of those, the near duplicates.
        evicted: insights dropped to keep a topic within its limit.
    """

    __slots__ = (
        "_config",
        "_signer",
        "_topic_of",
        "_topics",
        "deduplicated",
        "evicted",
        "near",
        "shared",
    )

    def __init__(self, config: PoolConfig, signer: InsightSigner | None) -> None:
        self._config = config
        self._signer = signer
        self._topics: dict[str, _Topic] = {}
        # The topic of every held insight, by id.
        self._topic_of: dict[str, str] = {}
        self.shared = 0
        self.deduplicated = 0
        self.near = 0
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._topics)

    def insights(self) -> list[Insight]:
        """Every held insight."""
        return [i for b in self._topics.values() for i in b.insights.values()]

    def count(self) -> int:
        """How many insights are held."""
        return sum(len(b.insights) for b in self._topics.values())

    def load(self, insights: list[Insight]) -> None:
        """Replace the held insights with ``insights``.

        An insight that fails the configured HMAC key is dropped and logged.
        """
        self._topics.clear()
        self._topic_of.clear()
        for insight in sorted(insights, key=lambda i: i.id):
            if self._signer is not None and not self._signer.verify(insight):
                log.warning("insight_rejected", insight=insight.id, reason="bad HMAC")
                continue
            bucket = self._topics.get(insight.topic)
            if bucket is None:
                bucket = self._topics[insight.topic] = _Topic(self._config)
            bucket.hold(insight)
            self._topic_of[insight.id] = insight.topic
            if not insight.erased:
                bucket.index.add(insight.id, insight.text)

    def put(
        self,
        text: str,
        topic: str,
        source: str,
        importance: float,
        message_ids: tuple[str, ...],
        insight_id: str | None = None,
    ) -> tuple[Literal["new", "duplicate", "near_duplicate"], Insight, float, list[str]]:
        """Store a new insight on ``topic``, unless it duplicates one held there.

        Args:
            text, topic, source: sanitized already.
            importance, message_ids: checked already.
            insight_id: the new insight's id (the share's command id, so that a
                share handled again makes the same insight); a fresh id if None.

        Returns:
            The status, the insight stored or duplicated, the similarity to it (1.0
            for a new one), and the ids of the insights the topic's limit evicted.

        Raises:
            InsightError: the topic is new and the pool holds its most topics.
        """
        bucket = self._topics.get(topic)
        if bucket is None:
            if len(self._topics) >= self._config.max_topics:
                raise InsightError(
                    f"the pool holds {len(self._topics)} topics, its limit; "
                    f"cannot open topic {topic!r}"
                )
            bucket = self._topics[topic] = _Topic(self._config)
        found = bucket.index.find(text)
        if found is not None:
            key, similarity = found
            self.deduplicated += 1
            status: Literal["duplicate", "near_duplicate"] = "duplicate"
            if similarity < 1.0:
                self.near += 1
                status = "near_duplicate"
            log.debug("insight_deduplicated", topic=topic, of=key, similarity=similarity)
            return status, bucket.insights[key], similarity, []
        insight = Insight(
            id=insight_id or new_id(),
            text=text,
            topic=topic,
            importance=importance,
            source=source,
            created=time.time(),
            source_message_ids=message_ids,
        )
        if self._signer is not None:
            insight = self._signer.sign(insight)
        self._hold(bucket, insight)
        self.shared += 1
        return "new", insight, 1.0, self._trim(bucket)

    def copy(self, insight: Insight) -> list[str] | None:
        """Hold a new insight another pool partition stored (unchecked for
        duplicates: that partition checked it); return the ids the topic's limit
        evicted, or None when it is held already or fails the HMAC key (logged)."""
        if insight.id in self._topic_of or not self.replay_put(insight, []):
            return None
        return self._trim(self._topics[insight.topic])

    def _trim(self, bucket: _Topic) -> list[str]:
        evicted = []
        while len(bucket.insights) > self._config.per_topic_limit:
            victim = bucket.weakest()
            self._evict(bucket, victim)
            evicted.append(victim)
        return evicted

    def replay_put(self, insight: Insight, evicted: list[str]) -> bool:
        """Do again what :meth:`put` did when it stored ``insight`` and evicted the
        insights ``evicted`` (a restore replaying the pool's journal). An insight that
        fails the configured HMAC key is dropped and logged, as in :meth:`load`:
        False then."""
        if self._signer is not None and not self._signer.verify(insight):
            log.warning("insight_rejected", insight=insight.id, reason="bad HMAC")
            return False
        bucket = self._topics.get(insight.topic)
        if bucket is None:
            bucket = self._topics[insight.topic] = _Topic(self._config)
        self._hold(bucket, insight)
        for key in evicted:
            if key in bucket.insights:
                self._evict(bucket, key)
        return True

    def _hold(self, bucket: _Topic, insight: Insight) -> None:
        bucket.hold(insight)
        self._topic_of[insight.id] = insight.topic
        bucket.index.add(insight.id, insight.text)

    def _evict(self, bucket: _Topic, key: str) -> None:
        victim = bucket.drop(key)
        self._topic_of.pop(key, None)
        bucket.index.remove(key)
        self.evicted += 1
        log.debug("insight_evicted", topic=victim.topic, insight=key)

    def find(self, insight_id: str) -> Insight | None:
        """The held insight with this id, if any."""
        topic = self._topic_of.get(insight_id)
        return None if topic is None else self._topics[topic].insights.get(insight_id)

    def erase_source(self, source: str) -> list[Insight]:
        """Remove the text of every insight ``source`` shared, keeping its provenance
        (id, source, topic, importance, time); return the erased insights."""
        erased: list[Insight] = []
        for bucket in self._topics.values():
            for key, insight in list(bucket.insights.items()):
                if insight.source != source or insight.erased:
                    continue
                blank = self.erased(insight)
                bucket.hold(blank)
                bucket.index.remove(key)
                erased.append(blank)
        return erased

    def erased(self, insight: Insight) -> Insight:
        """``insight`` without its text (signed again when a key is configured)."""
        blank = msgspec.structs.replace(insight, text="", erased=True, signature=None)
        return self._signer.sign(blank) if self._signer is not None else blank

    def best(self, topics: list[str] | None, query: str | None, k: int) -> list[Insight]:
        """The ``k`` best insights of ``topics`` (None: all): by BM25 relevance to
        ``query`` when it has words, else by importance, then newest first. Erased
        insights (no text) are not among them."""
        if topics is None:
            pool = [i for i in self.insights() if not i.erased]
        else:
            pool = [
                i
                for t in topics
                for i in self._topics.get(t, _EMPTY).insights.values()
                if not i.erased
            ]
        if query and tokenize(query):
            scores = BM25([i.text for i in pool]).scores(query)
            ranked = sorted(
                (p for p in zip(pool, scores, strict=True) if p[1] > 0),
                key=lambda p: (-p[1], -p[0].importance, -p[0].created),
            )
            return [i for i, _ in ranked[:k]]
        pool.sort(key=lambda i: (-i.importance, -i.created))
        return pool[:k]
