"""The insight pool actor (kind ``pool``): agents share insights, subscribers receive them.

One pool actor (``pool/main`` by convention) holds every shared insight, by topic:

- :class:`Share` records an insight with its provenance (source agent, time, the
  message ids it came from), after sanitizing its text; an exact or near
  duplicate of an insight already held on the topic is not stored again, and the
  reply names the insight it duplicates;
- each topic keeps at most ``per_topic_limit`` insights (the least important,
  then the oldest, go first);
- every new insight is told, as an :class:`InsightDelivery`, to
  ``<memory_kind>/<agent>`` of each agent subscribed to its topic (except its
  source); :class:`Subscribe` / :class:`Unsubscribe` take topics or ``*`` (all);
- :class:`RegisterFact` shares on the facts topic, which reaches every agent the
  pool knows whatever it subscribes to (MARSYS's coordinated facts: a fact one
  agent registers is visible to all);
- :class:`QueryInsights` returns the best insights of a topic, or of all.

Delivery never blocks the pool on a full mailbox (a memory actor may be asking
the pool at that very moment): an agent whose mailbox is full gets its
deliveries, in order, from a background task, and the outcome comes back to the
pool for its counters. Past ``max_deferred_deliveries`` waiting at once, a
delivery fails, counted and logged.
"""

from __future__ import annotations

import functools
import math
import os
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any, ClassVar, Final, Literal

import msgspec
import structlog

from actormem.actors.pool.commands import (
    WILDCARD,
    AgentCommand,
    DeliveryOutcome,
    GetPoolStats,
    PoolStats,
    QueryInsights,
    RegisterFact,
    Share,
    ShareResult,
    Subscribe,
    SubscriptionState,
    Unsubscribe,
)
from actormem.actors.pool.insights import (
    DEFAULT_MAX_INSIGHT_CHARS,
    Insight,
    InsightDelivery,
    InsightError,
    InsightSignatureError,
    InsightSigner,
)
from actormem.actors.pool.sanitize import clean_label, sanitize_insight_text
from actormem.actors.pool.subscriptions import Subscriptions
from actormem.actors.pool.vouch import AgentVoucher
from actormem.actors.retention import SessionFileError, SessionStore
from actormem.actors.text.bm25 import BM25, tokenize
from actormem.actors.text.duplicates import (
    DEFAULT_NEAR_DUPLICATE_THRESHOLD,
    DEFAULT_SHINGLE_SIZE,
    NearDuplicateIndex,
    words,
)
from actormem.runtime import Actor, ActorContext
from actormem.runtime.config import _Section
from actormem.runtime.errors import ActorError, MailboxFullError, RuntimeClosedError
from actormem.runtime.ids import new_id

__all__ = ("PoolActor", "PoolConfig", "PoolState")

log = structlog.get_logger("actormem.pool")

DEFAULT_PER_TOPIC_LIMIT: Final = 200
DEFAULT_MAX_TOPICS: Final = 1_000
DEFAULT_MAX_DEFERRED: Final = 10_000
DEFAULT_APPLIED_WINDOW: Final = 10_000
MAX_QUERY_K: Final = 1_000
MAX_SOURCE_MESSAGE_IDS: Final = 64
MAX_ID_CHARS: Final = 128


class PoolConfig(_Section, frozen=True):
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
        hmac_key: secret for the provenance HMAC ("" = no signing); never printed.
        hmac_key_env: name of an environment variable holding the key instead.
    """

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
        )
        if self.max_insight_chars < 16:
            raise ValueError(f"max_insight_chars must be >= 16, got {self.max_insight_chars}")
        if self.hmac_key and len(self.hmac_key.encode()) < 16:
            raise ValueError("hmac_key must be at least 16 bytes long")

    def __repr__(self) -> str:
        key = "***" if self.hmac_key else "''"
        return (
            f"PoolConfig(per_topic_limit={self.per_topic_limit}, "
            f"near_duplicate_threshold={self.near_duplicate_threshold}, "
            f"memory_kind={self.memory_kind!r}, hmac_key={key}, "
            f"hmac_key_env={self.hmac_key_env!r})"
        )

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

    def voucher(self, deployment: str = "") -> AgentVoucher:
        """Return what makes and checks agent vouchers (see :mod:`actormem.actors.pool.vouch`).

        Keyed by the configured HMAC key, else by ``ACTORMEM_VOUCHER_KEY``, else by
        this process's random key.

        Raises:
            ValueError: ``hmac_key_env`` names a variable that is unset.
        """
        return AgentVoucher(self._key(), deployment)


# -- the actor ------------------------------------------------------------------------


class PoolState(msgspec.Struct, frozen=True, kw_only=True):
    """What the pool saves: its insights and subscriptions."""

    version: int = 1
    insights: list[Insight] = msgspec.field(default_factory=list)
    subscriptions: list[SubscriptionState] = msgspec.field(default_factory=list)


class _Topic:
    __slots__ = ("index", "insights")

    def __init__(self, config: PoolConfig) -> None:
        self.insights: dict[str, Insight] = {}
        self.index = NearDuplicateIndex(config.near_duplicate_threshold, config.shingle_size)


def _check_importance(value: float) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise InsightError(f"importance must be a number, got {type(value).__name__}")
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise InsightError(f"importance must be within 0..1, got {value}")
    return float(value)


def _check_message_ids(ids: tuple[str, ...] | str) -> tuple[str, ...]:
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


class PoolActor(Actor):
    """The insight pool; see the module doc for its commands.

    Args:
        ctx: the actor's context.
        config: the pool's config (defaults if omitted).
        store: when given, the pool's insights and subscriptions are loaded from
            it on start and saved to it on stop (persistent retention).
    """

    def __init__(
        self,
        ctx: ActorContext,
        config: PoolConfig | None = None,
        store: SessionStore | None = None,
        deployment: str = "",
    ) -> None:
        super().__init__(ctx)
        self.config = config or PoolConfig()
        self.store = store
        self.signer = self.config.signer()
        self.voucher = self.config.voucher(deployment)
        self.facts_topic = self.config.facts_topic.casefold()
        self._topics: dict[str, _Topic] = {}
        self._subs = Subscriptions()
        self._applied: OrderedDict[str, ShareResult] = OrderedDict()
        self._backlog: dict[str, deque[InsightDelivery]] = {}
        self._deferred = 0
        self._shared = 0
        self._deduplicated = 0
        self._near = 0
        self._delivered = 0
        self._failed = 0
        self._rejected = 0
        self._evicted = 0

    @classmethod
    def factory(
        cls,
        config: PoolConfig | None = None,
        store: SessionStore | None = None,
        deployment: str = "",
    ) -> Callable[[ActorContext], PoolActor]:
        """Return an actor factory for ``rt.register("pool", ...)`` (``deployment``:
        see :class:`~actormem.actors.pool.vouch.AgentVoucher`)."""
        return functools.partial(cls, config=config, store=store, deployment=deployment)

    async def on_start(self) -> None:
        if self.store is None:
            return
        saved = await self.store.aload(self.ctx.address)
        if saved is not None and "pool" in saved:
            try:
                state = msgspec.convert(saved["pool"], type=PoolState)
            except msgspec.ValidationError as exc:
                path = self.store.path_for(self.ctx.address)
                raise SessionFileError(f"{path}: corrupt pool state ({exc})") from exc
            self.load_state(state)

    async def on_stop(self) -> None:
        if self.store is not None:
            await self.store.asave(self.ctx.address, {"pool": self.export_state()})

    def export_state(self) -> PoolState:
        """Return the insights and subscriptions as a serialisable state."""
        return PoolState(
            insights=[i for b in self._topics.values() for i in b.insights.values()],
            subscriptions=self._subs.export(),
        )

    def load_state(self, state: PoolState) -> None:
        """Replace the insights and subscriptions with ``state``'s.

        Saved insights are checked against the configured HMAC key (when there is
        one); one that fails is dropped and logged, not loaded.
        """
        self._topics.clear()
        for insight in sorted(state.insights, key=lambda i: i.id):
            if self.signer is not None and not self.signer.verify(insight):
                log.warning("insight_rejected", insight=insight.id, reason="bad saved HMAC")
                continue
            bucket = self._topics.get(insight.topic)
            if bucket is None:
                bucket = self._topics[insight.topic] = _Topic(self.config)
            bucket.insights[insight.id] = insight
            bucket.index.add(insight.id, insight.text)
        self._subs.load(state.subscriptions)

    async def receive(self, message: Any) -> Any:
        if isinstance(message, AgentCommand | DeliveryOutcome):
            self._check_voucher(message)
        match message:
            case Share():
                return self._share_command(message, message.topic)
            case RegisterFact():
                return self._share_command(message, self.facts_topic)
            case Subscribe():
                return self._subscribe(message)
            case Unsubscribe():
                return self._unsubscribe(message)
            case QueryInsights():
                return self._query(message)
            case GetPoolStats():
                return self.stats()
            case DeliveryOutcome():
                self._drained(message)
                return None
            case _:
                raise InsightError(f"the pool does not handle {type(message).__name__}")

    def _check_voucher(self, cmd: AgentCommand | DeliveryOutcome) -> None:
        """Refuse a command that acts for an agent unless that agent's memory vouched
        for it, and a DeliveryOutcome the pool did not make (vouch for) itself."""
        if self.voucher.check(cmd):
            return
        self._rejected += 1
        agent = cmd.source if isinstance(cmd, Share | RegisterFact) else cmd.agent
        name = type(cmd).__name__
        why = "no voucher" if cmd.voucher is None else "a voucher that does not match"
        log.warning("pool_command_refused", command=name, agent=str(agent)[:64], reason=why)
        if isinstance(cmd, DeliveryOutcome):
            raise InsightSignatureError(
                f"DeliveryOutcome is the pool's note to itself; this one carries {why}"
            )
        raise InsightSignatureError(
            f"{name} acts for agent {str(agent)[:64]!r} but carries {why} from its memory "
            f"actor: send it through the agent's handle (rt.memory(name).{_VERB[name]}(...)); "
            "across worker processes, set pool.hmac_key (or ACTORMEM_VOUCHER_KEY) on every one"
        )

    # -- sharing ------------------------------------------------------------------

    def _share_command(self, cmd: Share | RegisterFact, topic: str) -> ShareResult:
        done = self._applied.get(cmd.id)
        if done is not None:
            return done
        try:
            result = self._share(cmd, topic)
        except InsightError as exc:
            self._rejected += 1
            log.warning("insight_share_rejected", source=str(cmd.source)[:64], reason=str(exc))
            raise
        self._applied[cmd.id] = result
        if len(self._applied) > self.config.applied_ids_window:
            self._applied.popitem(last=False)
        return result

    def _share(self, cmd: Share | RegisterFact, raw_topic: str) -> ShareResult:
        text = sanitize_insight_text(cmd.text, self.config.max_insight_chars)
        if not words(text):
            raise InsightError("insight text has no words once sanitized")
        topic = clean_label(raw_topic, "topic").casefold()
        if topic == WILDCARD:
            raise InsightError("'*' means every topic; share under a named topic")
        source = clean_label(cmd.source, "source", MAX_ID_CHARS)
        importance = _check_importance(cmd.importance)
        message_ids = _check_message_ids(cmd.source_message_ids)
        bucket = self._topics.get(topic)
        if bucket is None:
            if len(self._topics) >= self.config.max_topics:
                raise InsightError(
                    f"the pool holds {len(self._topics)} topics, its limit; "
                    f"cannot open topic {topic!r}"
                )
            bucket = self._topics[topic] = _Topic(self.config)
        found = bucket.index.find(text)
        if found is not None:
            key, similarity = found
            self._deduplicated += 1
            status: Literal["duplicate", "near_duplicate"] = "duplicate"
            if similarity < 1.0:
                self._near += 1
                status = "near_duplicate"
            log.debug("insight_deduplicated", topic=topic, of=key, similarity=similarity)
            return ShareResult(status=status, insight=bucket.insights[key], similarity=similarity)
        insight = Insight(
            id=new_id(),
            text=text,
            topic=topic,
            importance=importance,
            source=source,
            created=time.time(),
            source_message_ids=message_ids,
        )
        if self.signer is not None:
            insight = self.signer.sign(insight)
        bucket.insights[insight.id] = insight
        bucket.index.add(insight.id, text)
        self._shared += 1
        self._enforce_limit(topic, bucket)
        recipients = self._recipients(topic, exclude=source)
        delivery = InsightDelivery(insight)
        for agent in recipients:
            self._deliver(agent, delivery)
        log.info(
            "insight_shared",
            insight=insight.id,
            topic=topic,
            source=source,
            recipients=len(recipients),
        )
        return ShareResult(status="new", insight=insight, recipients=len(recipients))

    def _enforce_limit(self, topic: str, bucket: _Topic) -> None:
        while len(bucket.insights) > self.config.per_topic_limit:
            victim = min(bucket.insights.values(), key=lambda i: (i.importance, i.created))
            del bucket.insights[victim.id]
            bucket.index.remove(victim.id)
            self._evicted += 1
            log.debug("insight_evicted", topic=topic, insight=victim.id)

    # -- delivery -------------------------------------------------------------------

    def _recipients(self, topic: str, exclude: str | None) -> list[str]:
        if topic == self.facts_topic:  # coordinated facts reach every known agent
            return [a for a in self._subs.agents() if a != exclude]
        return self._subs.recipients(topic, exclude)

    def _deliver(self, agent: str, delivery: InsightDelivery) -> None:
        backlog = self._backlog.get(agent)
        if backlog is not None:
            # Behind the deliveries already waiting, so the agent gets them in order.
            self._defer(agent, backlog, delivery)
            return
        try:
            self.ctx.runtime.tell_nowait(f"{self.config.memory_kind}/{agent}", delivery)
        except MailboxFullError:
            backlog = self._backlog[agent] = deque()
            self._defer(agent, backlog, delivery)
            self._start_drain(agent, backlog)
        except (ActorError, RuntimeClosedError) as exc:
            self._failed += 1
            log.warning(
                "insight_delivery_failed", agent=agent, insight=delivery.insight.id, reason=str(exc)
            )
        else:
            self._delivered += 1

    def _defer(
        self, agent: str, backlog: deque[InsightDelivery], delivery: InsightDelivery
    ) -> None:
        if self._deferred >= self.config.max_deferred_deliveries:
            self._failed += 1
            log.warning(
                "insight_delivery_failed",
                agent=agent,
                insight=delivery.insight.id,
                reason=f"mailbox full and {self._deferred} deliveries already deferred",
            )
            return
        backlog.append(delivery)
        self._deferred += 1

    def _start_drain(self, agent: str, backlog: deque[InsightDelivery]) -> None:
        """Tell ``backlog`` to the agent in order, waiting for mailbox space, in the background.

        The drain only pops from ``backlog``; the pool only appends to it and
        forgets it when a :class:`DeliveryOutcome` finds it empty, so no delivery
        is left behind between the drain's end and the outcome.
        """
        address = f"{self.config.memory_kind}/{agent}"
        runtime = self.ctx.runtime
        sent = [0]

        async def drain() -> None:
            while backlog:
                await runtime.tell(address, backlog[0])
                backlog.popleft()
                sent[0] += 1

        def outcome(_: Any, error: BaseException | None) -> DeliveryOutcome:
            # Vouched for, so that nobody else can make the pool drop a backlog.
            return self.voucher.vouch(
                DeliveryOutcome(
                    agent=agent, delivered=sent[0], error=None if error is None else str(error)
                )
            )

        self.ctx.pipe(drain, wrap=outcome)

    def _drained(self, outcome: DeliveryOutcome) -> None:
        self._delivered += outcome.delivered
        self._deferred = max(0, self._deferred - outcome.delivered)
        backlog = self._backlog.get(outcome.agent)
        if backlog is None:
            return
        if outcome.error is not None:
            lost = len(backlog)
            self._failed += lost
            self._deferred = max(0, self._deferred - lost)
            backlog.clear()
            del self._backlog[outcome.agent]
            log.warning(
                "insight_delivery_failed", agent=outcome.agent, count=lost, reason=outcome.error
            )
        elif backlog:
            self._start_drain(outcome.agent, backlog)  # more arrived after the drain ended
        else:
            del self._backlog[outcome.agent]

    # -- subscriptions -----------------------------------------------------------------

    def _topics_of(self, topics: tuple[str, ...] | str) -> list[str]:
        # msgspec does not check types passed to __init__, so a bare string
        # (``topics="news"``) would otherwise subscribe to n, e, w, s.
        if isinstance(topics, str):
            raise InsightError("topics must be a list of topic names, not one string")
        out = []
        for t in topics:
            out.append(WILDCARD if t == WILDCARD else clean_label(t, "topic").casefold())
        return out

    def _subscribe(self, cmd: Subscribe) -> SubscriptionState:
        agent = clean_label(cmd.agent, "agent", MAX_ID_CHARS)
        if agent != cmd.agent:
            raise InsightError(f"agent name {cmd.agent!r} holds control or invisible characters")
        topics = self._topics_of(cmd.topics)
        state = self._subs.subscribe(agent, topics)
        if cmd.backfill > 0:
            wanted = None if WILDCARD in topics else topics
            for insight in self._best(wanted, None, cmd.backfill):
                if insight.source != agent:
                    self._deliver(agent, InsightDelivery(insight))
        log.info("pool_subscribed", agent=agent, topics=topics)
        return state

    def _unsubscribe(self, cmd: Unsubscribe) -> SubscriptionState:
        topics = self._topics_of(cmd.topics)
        state = self._subs.unsubscribe(cmd.agent, topics)
        log.info("pool_unsubscribed", agent=cmd.agent, topics=topics)
        return state

    # -- queries ------------------------------------------------------------------------

    def _best(self, topics: list[str] | None, query: str | None, k: int) -> list[Insight]:
        if topics is None:
            pool = [i for b in self._topics.values() for i in b.insights.values()]
        else:
            pool = [i for t in topics for i in self._topics.get(t, _EMPTY).insights.values()]
        if query and tokenize(query):
            scores = BM25([i.text for i in pool]).scores(query)
            ranked = sorted(
                (p for p in zip(pool, scores, strict=True) if p[1] > 0),
                key=lambda p: (-p[1], -p[0].importance, -p[0].created),
            )
            return [i for i, _ in ranked[:k]]
        pool.sort(key=lambda i: (-i.importance, -i.created))
        return pool[:k]

    def _query(self, cmd: QueryInsights) -> tuple[Insight, ...]:
        if not isinstance(cmd.k, int) or not 1 <= cmd.k <= MAX_QUERY_K:
            raise InsightError(f"k must be within 1..{MAX_QUERY_K}, got {cmd.k!r}")
        topic = cmd.topic if cmd.topic == WILDCARD else clean_label(cmd.topic, "topic").casefold()
        return tuple(self._best(None if topic == WILDCARD else [topic], cmd.query, cmd.k))

    def stats(self) -> PoolStats:
        """Return the pool's counters."""
        return PoolStats(
            shared=self._shared,
            deduplicated=self._deduplicated,
            near_duplicates=self._near,
            delivered=self._delivered,
            failed_deliveries=self._failed,
            rejected=self._rejected,
            evicted=self._evicted,
            insights=sum(len(b.insights) for b in self._topics.values()),
            topics=len(self._topics),
            agents=len(self._subs),
        )


#: The handle method that sends each command vouched for (for error messages).
_VERB: Final = {
    "Share": "share",
    "RegisterFact": "register_fact",
    "Subscribe": "subscribe",
    "Unsubscribe": "unsubscribe",
}


class _EmptyTopic:
    insights: ClassVar[dict[str, Insight]] = {}


_EMPTY: Final = _EmptyTopic()
