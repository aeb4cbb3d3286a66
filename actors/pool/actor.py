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
- :class:`QueryInsights` returns the best insights of a topic, or of all.

Delivery never blocks the pool on a full mailbox (see
:mod:`actormem.actors.pool.delivery`).
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Final

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
from actormem.actors.pool.config import PoolConfig
from actormem.actors.pool.delivery import Deliveries
from actormem.actors.pool.insights import (
    Insight,
    InsightDelivery,
    InsightError,
    InsightSignatureError,
)
from actormem.actors.pool.sanitize import clean_label, sanitize_insight_text
from actormem.actors.pool.subscriptions import Subscriptions
from actormem.actors.pool.topics import MAX_ID_CHARS, Topics, check_importance, check_message_ids
from actormem.actors.retention import SessionStore
from actormem.actors.text.duplicates import words
from actormem.runtime import Actor, ActorContext
from actormem.runtime.state import SnapshotState

__all__ = ("PoolActor", "PoolState")

log = structlog.get_logger("actormem.pool")

MAX_QUERY_K: Final = 1_000


class PoolState(msgspec.Struct, frozen=True, kw_only=True):
    """What the pool saves: its insights and subscriptions."""

    version: int = 1
    insights: list[Insight] = msgspec.field(default_factory=list)
    subscriptions: list[SubscriptionState] = msgspec.field(default_factory=list)


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
        self._topics = Topics(self.config, self.signer)
        self._subs = Subscriptions()
        self._deliveries = Deliveries(ctx, self.config, self.voucher)
        self._applied: OrderedDict[str, ShareResult] = OrderedDict()
        self._rejected = 0

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
        await self.store.restore_parts(self.ctx.address, {"pool": _Saved(self)})

    async def on_stop(self) -> None:
        if self.store is not None:
            await self.store.save_parts(self.ctx.address, {"pool": _Saved(self)})

    def export_state(self) -> PoolState:
        """Return the insights and subscriptions as a serialisable state."""
        return PoolState(
            insights=self._topics.insights(),
            subscriptions=self._subs.export(),
        )

    def load_state(self, state: PoolState) -> None:
        """Replace the insights and subscriptions with ``state``'s.

        Saved insights are checked against the configured HMAC key (when there is
        one); one that fails is dropped and logged, not loaded.
        """
        self._topics.load(state.insights)
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
                self._deliveries.drained(message)
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
        importance = check_importance(cmd.importance)
        message_ids = check_message_ids(cmd.source_message_ids)
        status, insight, similarity = self._topics.put(text, topic, source, importance, message_ids)
        if status != "new":
            return ShareResult(status=status, insight=insight, similarity=similarity)
        recipients = self._recipients(topic, exclude=source)
        delivery = InsightDelivery(insight)
        for agent in recipients:
            self._deliveries.deliver(agent, delivery)
        log.info(
            "insight_shared",
            insight=insight.id,
            topic=topic,
            source=source,
            recipients=len(recipients),
        )
        return ShareResult(status="new", insight=insight, recipients=len(recipients))

    # -- recipients -------------------------------------------------------------------

    def _recipients(self, topic: str, exclude: str | None) -> list[str]:
        if topic == self.facts_topic:  # coordinated facts reach every known agent
            return [a for a in self._subs.agents() if a != exclude]
        return self._subs.recipients(topic, exclude)

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
            for insight in self._topics.best(wanted, None, cmd.backfill):
                if insight.source != agent:
                    self._deliveries.deliver(agent, InsightDelivery(insight))
        log.info("pool_subscribed", agent=agent, topics=topics)
        return state

    def _unsubscribe(self, cmd: Unsubscribe) -> SubscriptionState:
        topics = self._topics_of(cmd.topics)
        state = self._subs.unsubscribe(cmd.agent, topics)
        log.info("pool_unsubscribed", agent=cmd.agent, topics=topics)
        return state

    # -- queries ------------------------------------------------------------------------

    def _query(self, cmd: QueryInsights) -> tuple[Insight, ...]:
        if not isinstance(cmd.k, int) or not 1 <= cmd.k <= MAX_QUERY_K:
            raise InsightError(f"k must be within 1..{MAX_QUERY_K}, got {cmd.k!r}")
        topic = cmd.topic if cmd.topic == WILDCARD else clean_label(cmd.topic, "topic").casefold()
        return tuple(self._topics.best(None if topic == WILDCARD else [topic], cmd.query, cmd.k))

    def stats(self) -> PoolStats:
        """Return the pool's counters."""
        return PoolStats(
            shared=self._topics.shared,
            deduplicated=self._topics.deduplicated,
            near_duplicates=self._topics.near,
            delivered=self._deliveries.delivered,
            failed_deliveries=self._deliveries.failed,
            rejected=self._rejected,
            evicted=self._topics.evicted,
            insights=self._topics.count(),
            topics=len(self._topics),
            agents=len(self._subs),
        )


class _Saved(SnapshotState[PoolState]):
    """The pool's insights and subscriptions as the part its session file keeps.

    The pool itself does not implement :class:`~actormem.runtime.state.Durable`, so
    the Redis transport does not store its state at every command.
    """

    __slots__ = ("_pool",)

    state_type = PoolState

    def __init__(self, pool: PoolActor) -> None:
        self._pool = pool

    def export_state(self) -> PoolState:
        return self._pool.export_state()

    def load_state(self, state: PoolState) -> None:
        self._pool.load_state(state)


#: The handle method that sends each command vouched for (for error messages).
_VERB: Final = {
    "Share": "share",
    "RegisterFact": "register_fact",
    "Subscribe": "subscribe",
    "Unsubscribe": "unsubscribe",
}
