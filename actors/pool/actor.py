"""The insight pool actor (kind ``pool``): agents share insights, subscribers receive them.

:mod:`actormem.actors.pool` describes its commands, feeds, partitions, trust and
durable state; the modules beside this one hold the parts it serves them with.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Final

import msgspec
import structlog

from actormem.actors.errors import MemoryInputError
from actormem.actors.memory.inputs import check_command
from actormem.actors.metrics import ActorCounts
from actormem.actors.pool.commands import (
    POOL_KIND,
    WILDCARD,
    AgentCommand,
    DeliveryAck,
    DeliveryOutcome,
    FeedTick,
    ForgetSource,
    GetPoolStats,
    PeerForgot,
    PeerShared,
    PoolStats,
    QueryInsights,
    RegisterFact,
    Share,
    ShareResult,
    Subscribe,
    SubscriptionState,
    Unsubscribe,
    pool_addresses,
)
from actormem.actors.pool.config import PoolConfig
from actormem.actors.pool.cursors import Cursors
from actormem.actors.pool.delivery import Deliveries
from actormem.actors.pool.feeds import Feeds
from actormem.actors.pool.insights import (
    Insight,
    InsightError,
)
from actormem.actors.pool.journal import (
    Acked,
    Copied,
    Fed,
    Journal,
    Op,
    Shared,
    Subscribed,
    Unsubscribed,
    decode_op,
)
from actormem.actors.pool.sanitize import clean_label, sanitize_insight_text
from actormem.actors.pool.state import (
    STORED_APPLIED,
    AppliedShare,
    PoolState,
    SavedPool,
    erase_applied,
    load_applied,
    remember,
    replay,
    stored_applied,
)
from actormem.actors.pool.subscriptions import Subscriptions, followed_agents, topic_names
from actormem.actors.pool.topics import MAX_ID_CHARS, Topics, check_importance, check_message_ids
from actormem.actors.pool.trust import refusal
from actormem.actors.retention import SessionStore
from actormem.actors.text.duplicates import words
from actormem.runtime import Actor, ActorContext
from actormem.runtime.state import DurableChanges

__all__ = ("STORED_APPLIED", "AppliedShare", "PoolActor", "PoolState")

log = structlog.get_logger("actormem.pool")

MAX_QUERY_K: Final = 1_000

_encoder = msgspec.msgpack.Encoder()


class PoolActor(Actor):
    """The insight pool; see the module doc for its commands.

    Args:
        ctx: the actor's context.
        config: the pool's config (defaults if omitted).
        store: when given, the pool's state is loaded from it on start and saved to
            it on stop (persistent retention with the local transport; over Redis the
            transport stores it at every command).
        counts: the runtime's counts, which the pool's deliveries add to.
    """

    def __init__(
        self,
        ctx: ActorContext,
        config: PoolConfig | None = None,
        store: SessionStore | None = None,
        counts: ActorCounts | None = None,
    ) -> None:
        super().__init__(ctx)
        self.config = config or PoolConfig()
        self.store = store
        self.signer = self.config.signer()
        self.facts_topic = self.config.facts_topic.casefold()
        self._topics = Topics(self.config, self.signer)
        self._subs = Subscriptions()
        self._cursors = Cursors()
        self._deliveries = Deliveries(ctx, self.config, counts)
        self._applied: OrderedDict[str, ShareResult] = OrderedDict()
        self._rejected = 0
        self._dirty = False
        # What the commands did, for the durable store: made when the store restores
        # the pool (over Redis), so that nothing gathers where no store takes it.
        self._journal: Journal | None = None
        # A source was forgotten since the last durable change: the deliveries of its
        # insights sent before then (they quote them) go from the streams too.
        self._forgot = False
        # The transport loaded stored state (over Redis): a session file is older.
        self._restored = False
        addresses = pool_addresses(self.config.partitions)
        #: The other partitions (none when this actor is no partition of the pool).
        self.peers = [a for a in addresses if a != ctx.address] if ctx.address in addresses else []
        self._feeds = Feeds(self.config.feed) if self.config.delivery == "feed" else None
        # Tells to the other partitions, sent once the command is handled.
        self._to_peers: list[Any] = []

    @classmethod
    def factory(
        cls,
        config: PoolConfig | None = None,
        store: SessionStore | None = None,
        counts: ActorCounts | None = None,
    ) -> Callable[[ActorContext], PoolActor]:
        """Return an actor factory for ``rt.register("pool", ...)``."""
        return functools.partial(cls, config=config, store=store, counts=counts)

    async def on_start(self) -> None:
        if self.store is not None and not self._restored:
            await self.store.restore_parts(self.ctx.address, {"pool": SavedPool(self)})
        # Restored (here or by the transport): ask every agent whose deliveries are
        # not all confirmed how far it got; what is missing is sent again.
        probes = list(self._cursors.probes())
        for agent, probe in probes:
            self._deliveries.deliver(agent, probe)
        if probes:
            log.info("pool_deliveries_probed", agents=len(probes))

    async def on_stop(self) -> None:
        if self.store is not None:
            await self.store.save_parts(self.ctx.address, {"pool": SavedPool(self)})

    def export_state(self) -> PoolState:
        """Return the pool's state as a serialisable value."""
        return PoolState(
            insights=self._topics.insights(),
            subscriptions=self._subs.export(),
            applied=stored_applied(self._applied, self._topics),
            cursors=self._cursors.export(),
            delivery_number=self._cursors.number,
        )

    def load_state(self, state: PoolState) -> None:
        """Replace the pool's state with ``state``.

        Saved insights are checked against the configured HMAC key (when there is
        one); one that fails is dropped and logged, not loaded.
        """
        self._topics.load(state.insights)
        self._subs.load(state.subscriptions)
        self._applied = load_applied(state.applied, self._topics)
        self._cursors.load(state.delivery_number, state.cursors)

    # -- durable state (the protocol of actormem.runtime.state) -------------------------

    def durable_changes(self) -> DurableChanges:
        """The journal entries of the commands since the last call (see
        :mod:`.journal`), or now and then the whole state replacing them; nothing after
        a command that changed nothing (a query), so reads store nothing."""
        forgot, self._forgot = self._forgot, False
        journal = self._journal
        if journal is not None:
            self._dirty = False
            return journal.changes(self.export_state, trim_streams=forgot)
        if not self._dirty:
            return DurableChanges([])
        self._dirty = False
        return DurableChanges([], _encoder.encode(self.export_state()), trim_streams=forgot)

    def durable_restore(self, snapshot: bytes | None, log: list[bytes]) -> None:
        """Load the state the transport stored (on activation): its snapshot, then what
        the journal's entries after it did."""
        if snapshot is not None:
            self.load_state(msgspec.msgpack.decode(snapshot, type=PoolState))
        for entry in log:
            self._replay(decode_op(entry))
        if snapshot is not None or log:
            self._restored = True
        self._journal = Journal()
        self._journal.restored(snapshot, log)

    def _replay(self, op: Op) -> None:
        """Do again to the state what a journaled command did (no delivery is sent)."""
        replay(
            op,
            topics=self._topics,
            subs=self._subs,
            cursors=self._cursors,
            feeds=self._feeds,
            facts_topic=self.facts_topic,
            remember=self._remember,
        )

    def _changed(self, op: Op) -> None:
        """Note that a command changed the state, as ``op`` says."""
        self._dirty = True
        if self._journal is not None:
            self._journal.record(op)

    # -- commands -------------------------------------------------------------------

    async def receive(self, message: Any) -> Any:
        try:
            answer = self._handle(message)
        except BaseException:
            self._to_peers.clear()  # a refused command tells the partitions nothing
            raise
        if self._to_peers:
            notes, self._to_peers = self._to_peers, []
            for note in notes:
                for peer in self.peers:
                    await self.ctx.tell(peer, note)
        return answer

    def _handle(self, message: Any) -> Any:
        # Before anything changes: a raw command may bypass the handle's checks.
        try:
            check_command(message)
        except MemoryInputError:
            self._rejected += 1
            raise
        if isinstance(message, AgentCommand):
            self._check_sender(message)
        match message:
            case Share():
                return self._share_command(message, message.topic)
            case RegisterFact():
                return self._share_command(message, self.facts_topic)
            case Subscribe():
                return self._subscribe(message)
            case Unsubscribe():
                return self._unsubscribe(message)
            case ForgetSource():
                self._to_peers.append(PeerForgot(source=message.source))
                return self._forget(message.source)
            case QueryInsights():
                return self._query(message)
            case GetPoolStats():
                return self.stats()
            case DeliveryAck():
                self._acked(message)
                return None
            case DeliveryOutcome():
                if self.ctx.sender != self.ctx.address:
                    self._refuse("DeliveryOutcome", "-", "the pool's own note to itself")
                self._deliveries.drained(message)
                return None
            case FeedTick():
                return self._tick()
            case PeerShared(insight=insight, new=new):
                self._check_peer("PeerShared")
                if new:
                    self._copy(insight)
                elif self._feeds is not None:
                    self._feeds.shared_again(insight.id)
                return None
            case PeerForgot(source=source):
                self._check_peer("PeerForgot")
                self._forget(source)
                return None
            case _:
                raise InsightError(f"the pool does not handle {type(message).__name__}")

    def _check_sender(self, cmd: AgentCommand) -> None:
        """Refuse a command that acts for an agent unless that agent's memory sent it."""
        agent = cmd.agent if isinstance(cmd, Subscribe | Unsubscribe) else cmd.source
        expected = f"{self.config.memory_kind}/{agent}"
        if self.ctx.sender != expected:
            self._refuse(type(cmd).__name__, str(agent), expected)

    def _check_peer(self, name: str) -> None:
        sender = self.ctx.sender or ""
        if sender.partition("/")[0] != POOL_KIND or sender not in self.peers:
            self._refuse(name, "-", "another partition of the pool")

    def _refuse(self, name: str, agent: str, expected: str) -> None:
        self._rejected += 1
        raise refusal(name, agent, expected, self.ctx.sender)

    # -- sharing ------------------------------------------------------------------

    def _share_command(self, cmd: Share | RegisterFact, topic: str) -> ShareResult:
        done = self._applied.get(cmd.id)
        if done is not None:
            return done
        try:
            result, evicted, recipients = self._share(cmd, topic)
        except InsightError as exc:
            self._rejected += 1
            log.warning("insight_share_rejected", source=str(cmd.source)[:64], reason=str(exc))
            raise
        self._remember(cmd.id, result)
        self._changed(Shared(id=cmd.id, result=result, evicted=evicted, recipients=recipients))
        return result

    def _remember(self, key: str, result: ShareResult) -> None:
        remember(self._applied, key, result, self.config.applied_ids_window)

    def _share(
        self, cmd: Share | RegisterFact, raw_topic: str
    ) -> tuple[ShareResult, list[str], list[str]]:
        """Share ``cmd``'s insight; return the answer, the ids of the insights the
        topic's limit evicted, and the agents it was delivered to."""
        text = sanitize_insight_text(cmd.text, self.config.max_insight_chars)
        if not words(text):
            raise InsightError("insight text has no words once sanitized")
        topic = clean_label(raw_topic, "topic").casefold()
        if topic == WILDCARD:
            raise InsightError("'*' means every topic; share under a named topic")
        source = clean_label(cmd.source, "source", MAX_ID_CHARS)
        importance = check_importance(cmd.importance)
        message_ids = check_message_ids(cmd.source_message_ids)
        held = self._topics.find(cmd.id)
        if held is not None:  # shared before under this id (its result since forgotten)
            return ShareResult(status="duplicate", insight=held), [], []
        status, insight, similarity, evicted = self._topics.put(
            text, topic, source, importance, message_ids, insight_id=cmd.id
        )
        if status != "new":
            if self._feeds is not None:
                self._feeds.shared_again(insight.id)
                self._to_peers.append(PeerShared(insight=insight, new=False))
            return ShareResult(status=status, insight=insight, similarity=similarity), [], []
        self._to_peers.append(PeerShared(insight=insight))
        recipients = self._fan_out(insight, exclude=source)
        log.debug(
            "insight_shared",
            insight=insight.id,
            topic=topic,
            source=source,
            recipients=len(recipients),
        )
        result = ShareResult(status="new", insight=insight, recipients=len(recipients))
        return result, evicted, recipients

    def _deliver(self, agent: str, insight: Insight, *, last: bool = False) -> None:
        self._deliveries.deliver(agent, self._cursors.next(agent, insight, last=last))

    def _fan_out(self, insight: Insight, exclude: str | None) -> list[str]:
        """Send a new insight to its topic's subscribers now (a broadcast, or a fact),
        or make it a feed candidate; return the agents it was sent to."""
        feeds = self._feeds
        if feeds is not None and insight.topic != self.facts_topic:
            feeds.add(insight)
            return []
        recipients = self._recipients(insight.topic, exclude=exclude)
        for agent in recipients:
            self._deliver(agent, insight)
        return recipients

    def _copy(self, insight: Insight) -> None:
        """Hold (and send on, or feed) a new insight another partition stored."""
        evicted = self._topics.copy(insight)
        if evicted is None:
            return
        recipients = self._fan_out(insight, exclude=insight.source)
        self._changed(Copied(insight=insight, evicted=evicted, recipients=recipients))

    def _tick(self) -> int:
        """Deliver every subscriber's feed; return how many insights went out."""
        feeds = self._feeds
        if feeds is None:
            return 0
        fed = feeds.feed(self._subs.subscribed(), self._subs.accepts)
        sent = 0
        for agent, insights in fed:
            for n, insight in enumerate(insights):
                self._deliver(agent, insight, last=n == len(insights) - 1)
            sent += len(insights)
        if fed:
            self._changed(Fed(feeds=[(a, [i.id for i in got]) for a, got in fed]))
        return sent

    def _acked(self, ack: DeliveryAck) -> None:
        sender = self.ctx.sender or ""
        kind, _, agent = sender.partition("/")
        if kind != self.config.memory_kind or not agent:
            self._refuse("DeliveryAck", "-", f"{self.config.memory_kind}/<agent>")
        self._cursors.acked(agent, ack.through)
        if self._feeds is not None and (ack.interest or ack.talks_to):
            self._feeds.interest(agent, ack.interest, ack.talks_to)
        if ack.resend:
            again = self._cursors.resend(agent, ack.through)
            for delivery in again:
                self._deliveries.deliver(agent, delivery)
            log.info("insight_deliveries_resent", agent=agent, after=ack.through, count=len(again))
        self._changed(Acked(agent=agent, through=ack.through))

    # -- recipients -------------------------------------------------------------------

    def _recipients(self, topic: str, exclude: str | None) -> list[str]:
        if topic == self.facts_topic:  # coordinated facts reach every known agent
            return [a for a in self._subs.agents() if a != exclude]
        return self._subs.recipients(topic, exclude)

    # -- subscriptions -----------------------------------------------------------------

    def _subscribe(self, cmd: Subscribe) -> SubscriptionState:
        agent = clean_label(cmd.agent, "agent", MAX_ID_CHARS)
        if agent != cmd.agent:
            raise InsightError(f"agent name {cmd.agent!r} holds control or invisible characters")
        topics = topic_names(cmd.topics)
        follows = followed_agents(cmd.follows)
        state = self._subs.subscribe(agent, topics)
        if self._feeds is not None and follows:
            self._feeds.follow(agent, follows)
        backfill = []
        if cmd.backfill > 0:
            wanted = None if WILDCARD in topics else topics
            for insight in self._topics.best(wanted, None, cmd.backfill):
                if insight.source != agent:
                    self._deliver(agent, insight)
                    backfill.append(insight.id)
        self._changed(Subscribed(agent=agent, topics=topics, backfill=backfill))
        log.debug("pool_subscribed", agent=agent, topics=topics)
        return state

    def _unsubscribe(self, cmd: Unsubscribe) -> SubscriptionState:
        topics = topic_names(cmd.topics)
        state = self._subs.unsubscribe(cmd.agent, topics)
        self._changed(Unsubscribed(agent=cmd.agent, topics=topics))
        log.debug("pool_unsubscribed", agent=cmd.agent, topics=topics)
        return state

    # -- forgetting ---------------------------------------------------------------------

    def _forget(self, source: str) -> int:
        """Remove the text of everything ``source`` shared (provenance stays), and its
        subscriptions and delivery cursor; return how many insights lost their text.

        Every agent the pool delivers to gets each erased insight, as the next
        delivery of its chain: its memory drops the copy it holds.
        """
        fresh = {i.id: i for i in self._topics.erase_source(source)}
        erase_applied(self._applied, source, fresh, self._topics)
        self._cursors.erase(fresh.values())
        self._subs.remove(source)
        self._cursors.drop(source)
        if self._feeds is not None:
            self._feeds.forget(source)
        for agent in self._cursors.agents():
            for blank in fresh.values():
                self._deliver(agent, blank)
        self._dirty = self._forgot = True
        if self._journal is not None:
            self._journal.rewrite = True  # its entries quote what was erased
        log.info("pool_source_forgotten", source=source[:64], insights=len(fresh))
        return len(fresh)

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
            failed_deliveries=self._deliveries.failed + self._cursors.given_up,
            rejected=self._rejected,
            evicted=self._topics.evicted,
            insights=self._topics.count(),
            topics=len(self._topics),
            agents=len(self._subs),
            pending_deliveries=self._cursors.pending(),
        )
