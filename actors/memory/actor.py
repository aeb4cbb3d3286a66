"""The agent memory actor: one per agent, the only writer of that agent's memory.

It serves the memory commands over its parts: the messages (:mod:`.store`), the
queries over them (:mod:`.queries`), the context window (:mod:`.window`), the
compressions (:mod:`.compaction`) and recall; its durable state is a log of the
history and of the insight deliveries applied, plus a snapshot of the rest
(:mod:`.snapshot`), written and read back by :mod:`.durable`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import msgspec
import structlog

from actormem.actors.compression import RELOAD_TOOL_NAME, reload_tool_result
from actormem.actors.config import AppConfig
from actormem.actors.errors import MemoryInputError
from actormem.actors.memory import durable, edits
from actormem.actors.memory._pool_side import DeliveryLog, interest, take_delivery, to_pool
from actormem.actors.memory.commands import (
    Add,
    AddResult,
    AnswerToolCall,
    Clear,
    CompressionDone,
    Context,
    Delete,
    Expire,
    Export,
    Forget,
    Get,
    Load,
    MemoryExport,
    MemoryStats,
    Prune,
    Reload,
    Search,
    SetSummary,
    Stats,
    ToPool,
    Update,
)
from actormem.actors.memory.compaction import Compaction
from actormem.actors.memory.expiry import IdleClock, IdleSweeper
from actormem.actors.memory.inputs import check_command
from actormem.actors.memory.queries import MessageQueries
from actormem.actors.memory.recall_commands import RECALL_COMMANDS, serve_recall
from actormem.actors.memory.snapshot import (
    REPLAYABLE,
    LoggedEpisodes,
)
from actormem.actors.memory.store import MessageStore
from actormem.actors.memory.window import context_window
from actormem.actors.messages import Message
from actormem.actors.pool.commands import ForgetSource, pool_address
from actormem.actors.pool.insights import InsightDelivery
from actormem.actors.recall.agent import AgentRecall, RecallConfig
from actormem.actors.retention import erase_session
from actormem.actors.text import forget_cached_texts
from actormem.runtime import (
    Actor,
    ActorContext,
    TokenCounter,
    get_counter,
)
from actormem.runtime.state import DurableChanges, SnapshotState

__all__ = ("AgentMemory", "memory_factory")

log = structlog.get_logger("actormem.memory")

#: Commands that do not make an agent active (retention.ttl): the runtime's own.
_NOT_ACTIVITY: frozenset[type] = frozenset({Expire, CompressionDone, InsightDelivery})


class AgentMemory(Actor):
    """One agent's memory (see the module doc). Served through :class:`MemoryHandle`."""

    # No handler awaits anything, so an idle memory answers an in-process ask in the
    # asker's own task: no mailbox round trip (see ``Actor.inline_asks``).
    inline_asks = True

    __slots__ = (
        "_compaction",
        "_compacts",
        "_config",
        "_counter",
        "_deliveries",
        "_discarding",
        "_episodes",
        "_expires",
        "_forgotten",
        "_idle",
        "_pool",
        "_queries",
        "_recall",
        "_recall_config",
        "_saved_edits",
        "_store",
        "_terms",
        "_unobserved",
        "agent",
    )

    def __init__(
        self,
        ctx: ActorContext,
        config: AppConfig,
        recall: RecallConfig,
        counter: TokenCounter,
        sweeper: IdleSweeper | None = None,
    ) -> None:
        super().__init__(ctx)
        self.agent = ctx.key
        self._config = config.memory
        self._counter = counter
        self._store = MessageStore(config.memory, counter)
        self._queries = MessageQueries(self._store, config.memory.important_threshold)
        shards = config.redis.shards if ctx.runtime.transport.name == "redis" else 0
        self._compaction = Compaction(
            self.agent, config.compression, self._store, ctx, shards=shards
        )
        self._recall_config = recall
        self._recall: AgentRecall | None = None
        # Messages added before anything asked for recall: handed over when it is made.
        self._unobserved: list[Message] | None = None
        # recall.edits when the stored snapshot was written.
        self._saved_edits = 0
        self._episodes = LoggedEpisodes()
        # Over Redis, the insight deliveries kept as log entries (see .snapshot).
        self._deliveries = DeliveryLog()
        # Forgotten since the last durable change: the stored state is deleted.
        self._forgotten = False
        # The command being handled is a compression result not applied: the copy the
        # transport keeps of it goes (it may quote what an erasure removed).
        self._discarding = False
        self._idle = IdleClock(self.agent, config.retention.ttl, sweeper)
        #: The pool partition serving this agent.
        self._pool = pool_address(self.agent, config.pool.partitions)
        # The terms of the newest messages, by id (see _interest).
        self._terms: dict[str, list[str]] = {}
        # What every add asks (retention.ttl is set; compression is on), kept on the
        # actor itself: at 1,000 agents the objects that hold them are out of cache.
        self._expires = config.retention.ttl is not None
        self._compacts = self._compaction.enabled

    async def receive(self, message: Any) -> Any:
        if type(message) is Add and not self._expires:
            # Every agent's turn: an add is replayable (no snapshot needed) and,
            # with no retention.ttl, not watched as activity; the match below
            # would reach the same call. Its one argument check_command() looks
            # at, inline: an encoding that is not text (or None) is refused there.
            encoding = message.encoding
            if encoding is not None and type(encoding) is not str:
                check_command(message)
            return self._add(message.messages, encoding)
        # Before anything changes: over Redis a command may come from any client.
        check_command(message)
        store = self._store
        if type(message) not in REPLAYABLE:
            store.dirty = True
        if self._expires:
            expired = await self._expire(message)
            if expired is not None:
                return expired
        match message:
            case Add(messages=messages, encoding=encoding):
                return self._add(messages, encoding)
            case Context(max_tokens=max_tokens, query=query):
                return await self._context(max_tokens, query)
            case Get():
                return _answered(self._queries.get(message))
            case Search():
                return _answered(self._queries.search(message))
            case Delete(ids=ids, indices=indices):
                return store.delete(ids, indices)
            case Update():
                return self._update(message).detached()
            case SetSummary(text=text, replaces=replaces):
                return edits.set_summary(store, text, replaces, self.agent).detached()
            case Clear(history=history):
                removed = self._clear(history)
                if history:  # the session file keeps what is left
                    kept = self._recall.retention if self._recall is not None else None
                    await erase_session(self._recall_config.retention, self.agent, kept)
                return removed
            case Forget():
                return await self._forget()
            case Expire():
                return False  # no retention.ttl: agents do not expire
            case Stats():
                return self._stats()
            case Export(include_history=include_history):
                data = self._queries.export(self.agent, include_history)
                return msgspec.structs.replace(
                    data,
                    working=_answered(data.working),
                    history=_answered(data.history),
                    offloaded={k: _answered(v) for k, v in data.offloaded.items()},
                )
            case Load(data=data, overwrite=overwrite):
                return self._load(data, overwrite)
            case Prune(max_tokens=max_tokens, preserve_system=preserve_system):
                return store.prune(max_tokens, preserve_system)
            case Reload(offload_id=offload_id):
                return _answered(self._queries.reload(offload_id))
            case InsightDelivery():
                recall = self._recall
                if recall is None or not store.durable:
                    return take_delivery(self.ctx, self.recall, message, False, self._interest)
                return self._deliveries.take(self.ctx, recall, message, self._interest)
            case AnswerToolCall(call=call):
                if call.name == RELOAD_TOOL_NAME:
                    content = reload_tool_result(call.arguments, store.offloaded)
                    return Message(
                        role="tool", content=content, tool_call_id=call.id, name=call.name
                    )
                self.recall.changed()
                return await self.recall.control.answer(call)
            case CompressionDone():
                self._discarding = True  # also when it is refused
                self._discarding = not self._compaction.done(message)
                return None
            case ToPool(command=command):
                return to_pool(self.ctx, self.agent, command, self._pool)
            case _ if isinstance(message, RECALL_COMMANDS):
                return await serve_recall(self.recall, message, store, self._compaction.enabled)
        raise MemoryInputError(f"an agent memory does not serve {type(message).__name__}")

    def _interest(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """What the agent's next feed is ranked by (see :func:`.interest.interest`)."""
        terms, names, self._terms = interest(self._store.working, self.agent, self._terms)
        return terms, names

    @property
    def recall(self) -> AgentRecall:
        """Insights, long-term memory and episodes; made on first use (idle agents stay small)."""
        recall = self._recall
        if recall is None:
            recall = self._recall = AgentRecall(
                self.agent, self._recall_config, conversation=_Conversation(self)
            )
            if self._store.durable:
                # The transport keeps the whole state (Redis): no session file besides.
                recall.retention.store = None
            if self._unobserved:
                recall.observe(self._unobserved)
            self._unobserved = None
        return recall

    async def on_start(self) -> None:
        # A compression in flight when the memory was last stored is asked for again.
        self._compaction.resume()
        retention = self._recall_config.retention
        if retention.policy_for(self.agent) == "persistent" and not self._store.durable:
            await self.recall.retention.restore()

    async def on_stop(self) -> None:
        if self._recall is not None:
            await self._recall.retention.close()
            await self._recall.longterm.aclose()

    # -- writes -------------------------------------------------------------------

    def _observe(self, messages: list[Message]) -> None:
        """Hand added messages to recall, or keep them until it is made."""
        if self._recall is not None:
            self._recall.observe(messages)
        elif self._unobserved is None:
            self._unobserved = list(messages)
        else:
            self._unobserved.extend(messages)

    def _add(self, messages: list[Message], encoding: str | None) -> AddResult | None:
        store = self._store
        one = store.add_simple(messages, encoding)
        if one is not None:  # the hot path of every agent's turn
            if self._recall is None and self._unobserved is not None:
                self._unobserved.append(one)
            else:
                self._observe([one])
            if self._compacts:
                self._compaction.maybe_compress()
            if not self.ctx.asked:  # a tell: nobody reads the result
                return None
            return AddResult(
                ids=[one.id],
                tokens=[one.tokens],
                size=len(store.working),
                working_tokens=store.working_tokens,
            )
        counted = store.add(messages, encoding)
        self._observe(counted)
        self._compaction.maybe_compress()
        return AddResult(
            ids=[m.id for m in counted],
            tokens=[m.tokens for m in counted],
            size=len(store.working),
            working_tokens=store.working_tokens,
        )

    def _update(self, command: Update) -> Message:
        changes: dict[str, Any] = {}
        for field in ("content", "metadata", "importance"):
            value = getattr(command, field)
            if value is not None:
                changes[field] = value
        updated = edits.update(
            self._store, command.id, changes, command.set_metadata, command.remove_metadata
        )
        # Recall holds the message as it is now: what it has yet to take in, and
        # what it took in already (long-term memories recorded from it, episodes).
        if self._unobserved:
            self._unobserved = [updated if m.id == updated.id else m for m in self._unobserved]
        recall = self._recall
        if recall is not None:
            if any(m.id == updated.id for m in recall.awaiting_reply):
                recall.awaiting_reply = [
                    updated if m.id == updated.id else m for m in recall.awaiting_reply
                ]
            recall.longterm.revise(updated)
            recall.episodes.revise(updated)
            recall.changed()
        self._compaction.maybe_compress()
        return updated

    def _clear(self, history: bool) -> int:
        removed = self._store.clear(history)
        if history:
            forget_cached_texts()
        self._queries.drop_indexes()
        if history:
            if self._recall is not None:
                self._recall.clear()
            self._unobserved = None
            log.info("memory_history_wiped", agent=self.agent, working_removed=removed)
        return removed

    async def _forget(self) -> int:
        """Erase everything the agent has, as if it never existed (see :class:`Forget`),
        and have the pool erase the text of what it shared (and the copies other
        memories hold) and drop its subscriptions."""
        erased = self._store.forget()
        forget_cached_texts()
        self._queries.drop_indexes()
        self._compaction.compressions = self._compaction.tokens_saved = 0
        recall, self._recall = self._recall, None
        self._unobserved = None
        self._saved_edits = 0
        self._forgotten = True
        self._idle.forgotten()
        await erase_session(self._recall_config.retention, self.agent, None)
        await self.ctx.tell(self._pool, ForgetSource(source=self.agent))
        if recall is not None:
            await recall.longterm.aclose()
        log.info("memory_forgotten", agent=self.agent, history_erased=erased)
        return erased

    async def _expire(self, message: Any) -> bool | None:
        """Forget the agent first if it was idle past ``retention.ttl``; then note the
        command as activity. For an ``Expire``, return whether it was forgotten."""
        idle = self._idle
        kind = type(message)
        now = time.time()
        # Due by its stored time, with no activity known: its stored state expired.
        vanished = kind is Expire and message.due and idle.active_at is None
        expired = vanished or idle.expired(now)
        if expired:
            idle_s = round(now - (idle.active_at or now), 3)
            log.info("memory_expired", agent=self.agent, idle_s=idle_s, state_gone=vanished)
            await self._forget()
        if kind is Expire:
            if not expired:
                idle.watch(self.ctx.runtime)  # known here only now: due later
            return expired
        if kind not in _NOT_ACTIVITY and idle.touch(self.ctx.runtime, now):
            self._store.dirty = True  # the stored time of the last activity is stale
        return None

    def _load(self, data: MemoryExport, overwrite: bool, stored: bool = False) -> int:
        loaded = self._store.load(data, overwrite, stored=stored)
        self._compaction.maybe_compress()
        return loaded

    # -- reads ----------------------------------------------------------------------

    async def _context(self, max_tokens: int | None, query: str | None) -> list[dict[str, Any]]:
        if self._unobserved:
            self.recall  # noqa: B018 (made now: the messages so far feed core memory)
        budget = self._config.max_tokens if max_tokens is None else max_tokens
        return await context_window(self._store, budget, query, self._recall, self._counter)

    def _stats(self) -> MemoryStats:
        store = self._store
        compaction = self._compaction
        recall = self.recall if self._unobserved else self._recall
        return MemoryStats(
            size=len(store.working),
            history_size=len(store.history),
            working_tokens=store.working_tokens,
            history_tokens=store.history_tokens,
            offloaded=len(store.offloaded),
            insights_held=len(recall.inbox) if recall else 0,
            longterm_entries=len(recall.longterm) if recall else 0,
            episodes=len(recall.episodes.episodes()) if recall else 0,
            core_messages=len(recall.episodes.core()) if recall else 0,
            compressions=compaction.compressions,
            tokens_saved=compaction.tokens_saved,
            compressing=compaction.compressing,
            peak_working_tokens=store.peak_tokens,
            peak_size=store.peak_size,
        )

    # -- durable state (the protocol of actormem.runtime.state) ---------------------------

    def durable_changes(self) -> DurableChanges:
        """What to store since the last call (see :func:`.durable.durable_changes`)."""
        return durable.durable_changes(self)

    def durable_restore(self, snapshot: bytes | None, log: list[bytes]) -> None:
        """Rebuild the memory from what the transport stored, on activation.

        See :func:`.durable.durable_restore`.
        """
        durable.durable_restore(self, snapshot, log)


class _Conversation(SnapshotState[MemoryExport]):
    """The conversation (working view, history, offloads) as a retained part."""

    __slots__ = ("_memory",)

    state_type = MemoryExport

    def __init__(self, memory: AgentMemory) -> None:
        self._memory = memory

    def export_state(self) -> MemoryExport:
        return self._memory._queries.export(self._memory.agent, include_history=True)

    def load_state(self, state: MemoryExport) -> None:
        self._memory._load(state, overwrite=True, stored=True)

    def clear(self) -> None:
        self._memory._clear(history=True)


def memory_factory(
    config: AppConfig, sweeper: IdleSweeper | None = None
) -> Callable[[ActorContext], AgentMemory]:
    """Return the factory the runtime calls to activate an agent's memory actor.

    Args:
        config: the app config.
        sweeper: the sweeper expiring the agents (``retention.ttl``); one of its own
            when omitted (started by the first agent it watches).
    """
    counter = get_counter(config.memory.encoding)
    recall = RecallConfig(
        pool=config.pool,
        longterm=config.longterm,
        episodes=config.episodes,
        retention=config.retention,
    )
    # Embeddings make retrieval, and fact extraction record, await the network, so
    # receive may suspend: asks must then go through the mailbox instead of inline.
    networked = config.longterm.embedding_base_url or config.longterm.facts_base_url
    cls = _SuspendingAgentMemory if networked else AgentMemory
    ttl = config.retention.ttl
    if sweeper is None and ttl is not None:
        sweeper = IdleSweeper(ttl)

    def make(ctx: ActorContext) -> AgentMemory:
        return cls(ctx, config, recall, counter, sweeper)

    return make


class _SuspendingAgentMemory(AgentMemory):
    inline_asks = False


def _answered(messages: list[Message]) -> list[Message]:
    """``messages`` as an answer holds them: copies sharing none of the memory's dicts
    and lists (see :meth:`Message.detached`), so an asker that changes what it got,
    in process as over Redis, changes nothing stored."""
    return [m.detached() for m in messages]
