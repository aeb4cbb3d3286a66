"""The insight pool's configuration."""

from __future__ import annotations

import os
from typing import ClassVar, Final, Literal

import msgspec

from actormem.actors.pool.insights import DEFAULT_MAX_INSIGHT_CHARS, InsightSigner
from actormem.actors.text.duplicates import DEFAULT_NEAR_DUPLICATE_THRESHOLD, DEFAULT_SHINGLE_SIZE
from actormem.runtime.config import ConfigSection

__all__ = ("FeedConfig", "PoolConfig")

DEFAULT_PER_TOPIC_LIMIT: Final = 200
DEFAULT_MAX_TOPICS: Final = 1_000
DEFAULT_MAX_DEFERRED: Final = 10_000
DEFAULT_APPLIED_WINDOW: Final = 10_000


class FeedConfig(ConfigSection, frozen=True):
    """The ranked feed each subscriber gets with ``delivery = "feed"`` (``[pool.feed]``).

    Every tick, each subscriber receives at most ``size`` insights it has not had,
    on its topics, from the ones shared within the last ``window`` ticks. They are
    the best by a score, the weighted sum of four parts, each within 0..1:

    - ``relevance``: the share of the insight's terms the agent used in its recent
      messages;
    - ``recency``: halved every ``half_life`` ticks since the insight was shared;
    - ``social``: 1 when the agent follows its source (the ``follows`` of its
      subscription, and the agents its recent messages name), else 0;
    - ``popularity``: how often the insight was shared, against the most shared one
      of the window (log scale).

    Attributes:
        size: insights one subscriber gets per tick, at most.
        window: ticks an insight stays a candidate.
        half_life: ticks in which recency halves.
        relevance: the weight of relevance.
        recency: the weight of recency.
        social: the weight of social proximity.
        popularity: the weight of popularity.
        interval: seconds between ticks in an embedded runtime (``MemoryRuntime``);
            0: the application ticks (``MemoryRuntime.tick_feeds``); a simulation
            ticks once per step whatever this says.
    """

    size: int = 5
    window: int = 20
    half_life: float = 2.0
    relevance: float = 1.0
    recency: float = 0.5
    social: float = 1.0
    popularity: float = 0.5
    interval: float = 1.0

    def __post_init__(self) -> None:
        self._at_least(1, "size", "window")
        self._above(0.0, "half_life")
        self._at_least(0.0, "relevance", "recency", "social", "popularity", "interval")


class PoolConfig(ConfigSection, frozen=True):
    """The insight pool.

    Attributes:
        max_insight_chars: the longest insight text kept (longer ones are cut).
        near_duplicate_threshold: word-shingle Jaccard similarity in (0, 1] from
            which a shared text duplicates one already held on its topic.
        shingle_size: words per shingle for that similarity.
        per_topic_limit: insights kept per topic.
        max_topics: distinct topics the pool accepts.
        memory_kind: the actor kind that receives deliveries (``<kind>/<agent>``).
        facts_topic: the topic that reaches every known agent.
        max_deferred_deliveries: deliveries waiting on full mailboxes at once;
            past it a delivery fails (counted and logged, never silent).
        applied_ids_window: command ids remembered so a redelivered Share is not
            applied twice.
        hmac_key: secret for the provenance HMAC ("" = no signing); shown as ``***``
            wherever the config is printed or repr'd.
        hmac_key_env: name of an environment variable holding the key instead.
        delivery: ``broadcast`` (each new insight goes to every subscriber of its
            topic at once: deliveries grow with the square of the agents) or
            ``feed`` (each subscriber gets a ranked feed per tick: see
            :class:`FeedConfig`).
        partitions: pool actors sharing the work, each serving the subscribers
            that hash to it and holding a copy of every insight.
        feed: the ranked feed (``[pool.feed]``).
    """

    __secret_fields__: ClassVar[tuple[str, ...]] = ("hmac_key",)

    max_insight_chars: int = DEFAULT_MAX_INSIGHT_CHARS
    near_duplicate_threshold: float = DEFAULT_NEAR_DUPLICATE_THRESHOLD
    shingle_size: int = DEFAULT_SHINGLE_SIZE
    per_topic_limit: int = DEFAULT_PER_TOPIC_LIMIT
    max_topics: int = DEFAULT_MAX_TOPICS
    memory_kind: str = "memory"
    facts_topic: str = "facts"
    max_deferred_deliveries: int = DEFAULT_MAX_DEFERRED
    applied_ids_window: int = DEFAULT_APPLIED_WINDOW
    hmac_key: str = ""
    hmac_key_env: str = ""
    delivery: Literal["broadcast", "feed"] = "broadcast"
    partitions: int = 1
    feed: FeedConfig = msgspec.field(default_factory=FeedConfig)

    def __post_init__(self) -> None:
        if not 0.0 < self.near_duplicate_threshold <= 1.0:
            raise ValueError(
                f"near_duplicate_threshold must be within (0, 1], got "
                f"{self.near_duplicate_threshold}"
            )
        self._at_least(
            1,
            "shingle_size",
            "per_topic_limit",
            "max_topics",
            "max_deferred_deliveries",
            "applied_ids_window",
            "partitions",
        )
        if self.max_insight_chars < 16:
            raise ValueError(f"max_insight_chars must be >= 16, got {self.max_insight_chars}")
        if self.hmac_key and len(self.hmac_key.encode()) < 16:
            raise ValueError("hmac_key must be at least 16 bytes long")

    def _key(self) -> str:
        key = self.hmac_key
        if not key and self.hmac_key_env:
            key = os.environ.get(self.hmac_key_env, "")
            if not key:
                raise ValueError(f"hmac_key_env: environment variable {self.hmac_key_env} is unset")
        return key

    def signer(self) -> InsightSigner | None:
        """Return the signer for the configured key, or None when there is none.

        Raises:
            ValueError: ``hmac_key_env`` names a variable that is unset or too short.
        """
        key = self._key()
        return InsightSigner(key) if key else None
