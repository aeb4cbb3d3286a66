"""The agent memory actor: one per agent, the only writer of that agent's memory.

Dual storage, as in AutoContextMemory: the *original history* is append-only and
nothing rewrites it; the *working view* is what the agent sees, and prune (and
the compressor) rewrite it. Every message's tokens are counted once, when it is
added, and the working view's total is kept up to date as it changes, so
budgets never need a recount.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import structlog

from actormem.actors.compression import (
    CONTEXT_RELOAD_TOOL,
    RELOAD_TOOL_NAME,
    CompressionConfig,
    CompressionOutcome,
    CompressRequest,
    compressor_address,
    reload_tool_result,
)
from actormem.actors.config import AppConfig
from actormem.actors.conversation import group_units, leading_system_count
from actormem.actors.errors import ContextBudgetError, MemoryInputError
from actormem.actors.memory.commands import (
    EXPORT_VERSION,
    Add,
    AddResult,
    AnswerToolCall,
    Clear,
    CompressionDone,
    Context,
    Delete,
    EndRun,
    Export,
    Get,
    HeldInsights,
    Load,
    MemoryExport,
    MemoryStats,
    MemoryTools,
    Prune,
    PruneResult,
    RecallEpisode,
    Record,
    Reload,
    Retrieve,
    Search,
    StartEpisode,
    Stats,
    SummarizeEpisodes,
    Vouch,
)
from actormem.actors.messages import Message, count_tokens, decode_message, encode_message
from actormem.actors.pool.commands import AgentCommand, RegisterFact, Share
from actormem.actors.pool.insights import InsightDelivery
from actormem.actors.pool.vouch import AgentVoucher
from actormem.actors.recall.agent import BLOCK_FRAMING, BLOCK_SHARE, AgentRecall, RecallConfig
from actormem.actors.text.bm25 import BM25
from actormem.runtime import Actor, ActorContext, TokenCounter, get_counter
from actormem.runtime.tokens import REPLY_PRIMING_TOKENS

__all__ = ("AgentMemory", "memory_factory")

log = structlog.get_logger("actormem.memory")

#: Results a ranked search returns when the caller gives no ``k``.
DEFAULT_SEARCH_K = 10


class _Snapshot(msgspec.Struct, kw_only=True):
    """The non-history part of a memory's durable state (see ``durable_changes``).

    The working view is stored as message ids into the history plus the messages
    the history does not hold (compressed forms), so a snapshot stays small
    however long the conversation. New fields go last, with defaults.
    """

    working: list[str]
    extra: list[Message] = []
    offloaded: dict[str, list[Message]] = {}
    history_skip: int = 0
    version: int = 0
    recall: dict[str, bytes] = {}
    compressions: int = 0
    tokens_saved: int = 0
    peak_tokens: int = 0
    peak_size: int = 0
    # Log entries (counted from the log's start) this snapshot accounts for: the
    # ones after it were added by plain adds and are replayed as such on load.
    # -1: all of them (snapshots written before the mark existed).
    log_mark: int = -1
    # Ids of added messages recall has not taken in yet (it is made on first
    # read); None when recall was made and its state is in ``recall``.
    unobserved: list[str] | None = None
    # Ids of observed messages recall records at the next reply.
    awaiting_reply: list[str] = []


#: Commands whose whole effect on the state a plain add's replay reproduces (adds)
#: or that change nothing (reads): after them, no new snapshot is needed unless
#: the working view was rewritten or recall changed otherwise (both tracked).
_REPLAYABLE: frozenset[type] = frozenset(
    {Add, Context, Get, Search, Stats, Export, Reload, HeldInsights, MemoryTools, RecallEpisode}
)

_snapshot_encoder = msgspec.msgpack.Encoder()
_snapshot_decoder = msgspec.msgpack.Decoder(_Snapshot)


class AgentMemory(Actor):
    """One agent's memory (see the module doc). Served through :class:`MemoryHandle`."""

    # No handler awaits anything, so an idle memory answers an in-process ask in the
    # asker's own task: no mailbox round trip (see ``Actor.inline_asks``).
    inline_asks = True

    __slots__ = (
        "_bm25",
        "_compress_floor",
        "_compress_token",
        "_compressing",
        "_compression",
        "_compressions",
        "_config",
        "_counter",
        "_dirty",
        "_durable",
        "_history",
        "_history_ids",
        "_history_skip",
        "_history_tokens",
        "_log_pending",
        "_offloaded",
        "_peak_size",
        "_peak_tokens",
        "_recall",
        "_recall_config",
        "_saved_edits",
        "_tokens_saved",
        "_unobserved",
        "_version",
        "_voucher",
        "_working",
        "_working_tokens",
        "agent",
    )

    def __init__(
        self,
        ctx: ActorContext,
        config: AppConfig,
        recall: RecallConfig,
        counter: TokenCounter,
        voucher: AgentVoucher | None = None,
    ) -> None:
        super().__init__(ctx)
        self.agent = ctx.key
        self._voucher = voucher or config.pool.voucher()
        self._config = config.memory
        self._compression = config.compression
        self._compressing = False
        self._compress_token = ""
        # After a compression that could not get under budget, wait for this many
        # messages before trying again (else every add would ask once more).
        self._compress_floor = 0
        self._compressions = 0
        self._tokens_saved = 0
        self._peak_tokens = 0
        self._peak_size = 0
        self._recall_config = recall
        self._recall: AgentRecall | None = None
        # Messages added before anything asked for recall: handed over when it is made.
        self._unobserved: list[Message] | None = None
        self._counter = counter
        self._working: list[Message] = []
        self._working_tokens = 0
        self._history: list[Message] = []
        self._history_ids: set[str] = set()
        self._history_tokens = 0
        self._offloaded: dict[str, list[Message]] = {}
        # Bumped whenever the working view is rewritten (not on append): caches
        # and, later, compression results computed on an older view check it.
        self._version = 0
        self._bm25: tuple[tuple[str, int, int], BM25] | None = None
        # Durable state (Redis transport): off until the transport restores us.
        self._durable = False
        self._log_pending: list[Message] = []
        self._history_skip = 0
        # The stored snapshot is out of date (beyond what replaying adds restores).
        self._dirty = False
        # recall.edits when the stored snapshot was written.
        self._saved_edits = 0

    async def receive(self, message: Any) -> Any:
        if type(message) not in _REPLAYABLE:
            self._dirty = True
        match message:
            case Add(messages=messages):
                return self._add(messages)
            case Context(max_tokens=max_tokens, query=query):
                return await self._context(max_tokens, query)
            case Get():
                return self._get(message)
            case Search():
                return self._search(message)
            case Delete(ids=ids, indices=indices):
                return self._delete(ids, indices)
            case Clear(history=history):
                return self._clear(history)
            case Stats():
                return self._stats()
            case Export(include_history=include_history):
                return self._export(include_history)
            case Load(data=data, overwrite=overwrite):
                return self._load(data, overwrite)
            case Prune(max_tokens=max_tokens, preserve_system=preserve_system):
                return self._prune(max_tokens, preserve_system)
            case Reload(offload_id=offload_id):
                return self._reload(offload_id)
            case InsightDelivery(insight=insight):
                return self.recall.accept_insight(insight)
            case HeldInsights(query=query, k=k):
                return self.recall.inbox.relevant(query, k)
            case Record(messages=messages):
                self.recall.changed()
                return len(self.recall.longterm.record(self._counted(messages, "record")))
            case Retrieve(query=query, k=k):
                self.recall.changed()  # a recall makes memories recent again
                return await self.recall.longterm.retrieve(query, k)
            case MemoryTools():
                tools = self.recall.control.tools()
                if self._compression.enabled:
                    tools = [*tools, CONTEXT_RELOAD_TOOL]
                return tools
            case AnswerToolCall(call=call):
                if call.name == RELOAD_TOOL_NAME:
                    content = reload_tool_result(call.arguments, self._offloaded)
                    return Message(
                        role="tool", content=content, tool_call_id=call.id, name=call.name
                    )
                self.recall.changed()
                return await self.recall.control.answer(call)
            case CompressionDone(version=version, outcome=outcome, error=error, token=token):
                if not self._compressing or not secrets.compare_digest(token, self._compress_token):
                    raise MemoryInputError("no compression with that token is in flight")
                self._compression_done(version, outcome, error)
                return None
            case StartEpisode(metadata=metadata):
                self.recall.changed()
                return self.recall.episodes.start_episode(metadata)
            case RecallEpisode(query=query, k=k):
                return self.recall.episodes.recall_episodes(query, k)
            case SummarizeEpisodes():
                return self.recall.episodes.summarize_episodes()
            case EndRun():
                self.recall.changed()
                await self.recall.retention.end_run()
                return None
            case Vouch(command=command):
                return self._vouch(command)
        raise MemoryInputError(f"an agent memory does not serve {type(message).__name__}")

    @property
    def recall(self) -> AgentRecall:
        """Insights, long-term memory and episodes; made on first use (idle agents stay small)."""
        recall = self._recall
        if recall is None:
            recall = self._recall = AgentRecall(
                self.agent, self._recall_config, conversation=(_Conversation(self), MemoryExport)
            )
            if self._unobserved:
                recall.observe(self._unobserved)
            self._unobserved = None
        return recall

    async def on_start(self) -> None:
        if self._recall_config.retention.policy_for(self.agent) == "persistent":
            await self.recall.retention.restore()

    async def on_stop(self) -> None:
        if self._recall is not None:
            await self._recall.retention.close()
            await self._recall.longterm.aclose()

    # -- writes -------------------------------------------------------------------

    def _counted(self, messages: Sequence[Message], what: str) -> list[Message]:
        """Validate messages and return them with their token counts cached."""
        if not isinstance(messages, list | tuple):
            raise MemoryInputError(f"{what} takes a list of messages")
        if len(messages) > self._config.max_batch:
            raise MemoryInputError(
                f"{what} got {len(messages)} messages; at most {self._config.max_batch} at once"
            )
        limit = self._config.max_message_chars
        if len(messages) == 1:  # the common case, without the bookkeeping below
            m = messages[0]
            if isinstance(m, Message) and len(m.text()) <= limit:
                return [m.with_tokens(count_tokens(m, self._counter))]
        seen: set[str] = set()
        out = []
        for i, m in enumerate(messages):
            if not isinstance(m, Message):
                raise MemoryInputError(f"{what}: item {i} is a {type(m).__name__}, not a Message")
            if m.id in seen:
                raise MemoryInputError(f"{what}: message id {m.id!r} appears twice")
            seen.add(m.id)
            size = len(m.text())
            if size > limit:
                raise MemoryInputError(
                    f"{what}: message {m.id!r} has {size} characters; the limit is {limit}"
                )
            out.append(m.with_tokens(count_tokens(m, self._counter)))
        return out

    def _append_history(self, messages: Sequence[Message]) -> None:
        for m in messages:
            if m.id not in self._history_ids:
                self._history_ids.add(m.id)
                self._history.append(m)
                self._history_tokens += m.tokens
                if self._durable:
                    self._log_pending.append(m)

    def _add(self, messages: list[Message]) -> AddResult:
        if type(messages) is list and len(messages) == 1:
            m = messages[0]
            if (
                type(m) is Message
                and type(m.content) is str
                and len(m.content) <= self._config.max_message_chars
                and m.id not in self._history_ids
            ):
                return self._add_one(m.with_tokens(count_tokens(m, self._counter)))
        counted = self._counted(messages, "add")
        clash = [m.id for m in counted if m.id in self._history_ids]
        if clash:
            raise MemoryInputError(
                f"add: message id {clash[0]!r} is already stored"
                + (f" (and {len(clash) - 1} more)" if len(clash) > 1 else "")
            )
        self._working.extend(counted)
        added = sum(m.tokens for m in counted)
        self._working_tokens += added
        self._append_history(counted)
        if self._recall is not None:
            self._recall.observe(counted)
        elif self._unobserved is None:
            self._unobserved = list(counted)
        else:
            self._unobserved.extend(counted)
        self._note_peak()
        self._maybe_compress()
        return AddResult(
            ids=[m.id for m in counted],
            tokens=[m.tokens for m in counted],
            size=len(self._working),
            working_tokens=self._working_tokens,
        )

    def _add_one(self, m: Message) -> AddResult:
        """:meth:`_add` of one valid, new, counted message: the hot path of every
        agent's turn, without the batch bookkeeping (the same effects)."""
        working = self._working
        working.append(m)
        tokens = m.tokens
        self._working_tokens += tokens
        self._history_ids.add(m.id)
        self._history.append(m)
        self._history_tokens += tokens
        if self._durable:
            self._log_pending.append(m)
        if self._recall is not None:
            self._recall.observe([m])
        elif self._unobserved is None:
            self._unobserved = [m]
        else:
            self._unobserved.append(m)
        size = len(working)
        if self._working_tokens > self._peak_tokens:
            self._peak_tokens = self._working_tokens
        if size > self._peak_size:
            self._peak_size = size
        if self._compression.enabled:
            self._maybe_compress()
        return AddResult(
            ids=[m.id], tokens=[tokens], size=size, working_tokens=self._working_tokens
        )

    def _set_working(self, messages: list[Message]) -> None:
        self._working = messages
        self._working_tokens = sum(m.tokens for m in messages)
        self._version += 1
        self._dirty = True

    def _delete(self, ids: list[str], indices: list[int]) -> int:
        if not ids and not indices:
            raise MemoryInputError("delete needs ids or indices")
        n = len(self._working)
        doomed: set[int] = set()
        for index in indices:
            if not -n <= index < n:
                raise MemoryInputError(f"delete: index {index} is out of range for {n} messages")
            doomed.add(index % n)
        if ids:
            wanted = set(ids)
            for pos, m in enumerate(self._working):
                if m.id in wanted:
                    doomed.add(pos)
                    wanted.discard(m.id)
            if wanted:
                missing = sorted(wanted)
                raise MemoryInputError(
                    f"delete: no message with id {missing[0]!r} in the working view"
                    + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
                )
        self._set_working([m for pos, m in enumerate(self._working) if pos not in doomed])
        return len(doomed)

    def _clear(self, history: bool) -> int:
        removed = len(self._working)
        self._set_working([])
        if history:
            # The stored log is append-only: the wiped entries are skipped on reload.
            self._history_skip += len(self._history) + len(self._log_pending)
            self._log_pending = []
            self._history = []
            self._history_ids = set()
            self._history_tokens = 0
            self._offloaded = {}
            if self._recall is not None:
                self._recall.clear()
            self._unobserved = None
            log.info("memory_history_wiped", agent=self.agent, working_removed=removed)
        return removed

    def _load(self, data: MemoryExport, overwrite: bool) -> int:
        if not isinstance(data, MemoryExport):
            raise MemoryInputError("load takes a MemoryExport")
        if data.version != EXPORT_VERSION:
            raise MemoryInputError(
                f"load: export format version {data.version} is not supported "
                f"(this version reads {EXPORT_VERSION})"
            )
        # Validate everything before changing anything.
        working = self._counted(data.working, "load")
        history = self._counted(data.history, "load (history)") if data.history else []
        offloaded = {k: self._counted(v, "load (offloaded)") for k, v in data.offloaded.items()}
        if overwrite:
            self._set_working(working)
            loaded = len(working)
        else:
            have = {m.id for m in self._working}
            fresh = [m for m in working if m.id not in have]
            self._working.extend(fresh)
            self._working_tokens += sum(m.tokens for m in fresh)
            loaded = len(fresh)
        self._append_history(history)
        self._append_history(working)
        self._offloaded.update(offloaded)
        self._note_peak()
        self._maybe_compress()
        return loaded

    def _prune(self, max_tokens: int, preserve_system: bool) -> PruneResult:
        if max_tokens < 1:
            raise MemoryInputError(f"prune: max_tokens must be >= 1, got {max_tokens}")
        working = self._working
        head = leading_system_count(working) if preserve_system else 0
        budget = max_tokens - sum(m.tokens for m in working[:head])
        keep: set[int] = set(range(head))
        units = group_units(working[head:])
        positions = {id(m): head + i for i, m in enumerate(working[head:])}
        for unit in reversed(units):
            if unit.tokens > budget:
                break
            budget -= unit.tokens
            keep.update(positions[id(m)] for m in unit.messages)
        removed = len(working) - len(keep)
        if removed:
            self._set_working([m for pos, m in enumerate(working) if pos in keep])
        return PruneResult(removed=removed, working_tokens=self._working_tokens)

    def _vouch(self, command: AgentCommand) -> AgentCommand:
        """Make ``command`` act for this agent, whatever agent it named, and vouch for it."""
        if not isinstance(command, AgentCommand):
            raise MemoryInputError(
                f"vouch takes Share, RegisterFact, Subscribe or Unsubscribe, "
                f"not {type(command).__name__}"
            )
        if isinstance(command, Share | RegisterFact):
            mine: AgentCommand = msgspec.structs.replace(command, source=self.agent)
        else:
            mine = msgspec.structs.replace(command, agent=self.agent)
        return self._voucher.vouch(mine)

    # -- compression ------------------------------------------------------------------

    def _note_peak(self) -> None:
        self._peak_tokens = max(self._peak_tokens, self._working_tokens)
        self._peak_size = max(self._peak_size, len(self._working))

    def _maybe_compress(self) -> None:
        """Ask the compressor when a threshold is crossed; keep serving meanwhile."""
        cfg = self._compression
        size = len(self._working)
        if (
            not cfg.enabled
            or self._compressing
            or size <= self._compress_floor
            or not cfg.over_budget(size, self._working_tokens)
        ):
            return
        self._compressing = True
        token = self._compress_token = secrets.token_hex(16)
        version = self._version
        request = CompressRequest(agent=self.agent, messages=list(self._working), version=version)
        address = compressor_address(self.agent, cfg.concurrency)
        runtime = self.ctx.runtime

        async def ask() -> Any:
            return await runtime.ask(address, request, timeout=cfg.timeout + 5)

        def done(outcome: Any, error: BaseException | None) -> CompressionDone:
            if error is not None:
                reason = f"{type(error).__name__}: {error}"
                return CompressionDone(version=version, error=reason, token=token)
            return CompressionDone(version=version, outcome=outcome, token=token)

        self.ctx.pipe(ask, wrap=done)

    def _compression_done(
        self, version: int, outcome: CompressionOutcome | None, error: str | None
    ) -> None:
        """Apply a compression to the prefix it was computed from; keep what came after."""
        self._compressing = False
        cfg: CompressionConfig = self._compression
        if outcome is None:
            # Nothing changed; wait for more messages before asking again.
            self._compress_floor = len(self._working) + max(1, cfg.msg_threshold // 10)
            log.warning("compression_failed", agent=self.agent, reason=error)
            return
        if version != self._version or len(self._working) < outcome.messages_before:
            # The view was rewritten meanwhile (delete, prune, clear, load): the
            # result no longer fits it. The next add asks again if still needed.
            log.info("compression_discarded", agent=self.agent, reason="view changed")
            self._maybe_compress()
            return
        added_since = self._working[outcome.messages_before :]
        self._set_working([*outcome.messages, *added_since])
        self._offloaded.update(outcome.offloaded)
        self._compressions += 1
        self._tokens_saved += max(0, outcome.tokens_saved)
        if outcome.under_budget:
            self._compress_floor = 0
        else:
            self._compress_floor = len(self._working) + max(1, cfg.msg_threshold // 10)
        self._maybe_compress()

    # -- reads ----------------------------------------------------------------------

    def _source(self, scope: str) -> list[Message]:
        if scope == "working":
            return self._working
        if scope == "history":
            return self._history
        if scope == "offloaded":
            return [m for block in self._offloaded.values() for m in block]
        raise MemoryInputError(f"scope must be 'working', 'history' or 'offloaded', got {scope!r}")

    def _get(self, q: Get) -> list[Message]:
        if q.recent_n is not None and q.recent_n < 0:
            raise MemoryInputError(f"recent_n must be >= 0, got {q.recent_n}")
        tests: list[Callable[[Message], bool]] = []
        if q.roles is not None:
            roles = set(q.roles)
            tests.append(lambda m: m.role in roles)
        if q.names is not None:
            names = set(q.names)
            tests.append(lambda m: m.name in names)
        if q.metadata:
            wanted = q.metadata.items()
            tests.append(lambda m: all(m.metadata.get(k) == v for k, v in wanted))
        if q.since is not None:
            since = q.since
            tests.append(lambda m: m.timestamp >= since)
        if q.until is not None:
            until = q.until
            tests.append(lambda m: m.timestamp < until)
        if q.important:
            threshold = self._config.important_threshold
            tests.append(
                lambda m: (
                    bool(m.metadata.get("important"))
                    or (m.importance is not None and m.importance >= threshold)
                )
            )
        source = self._source(q.scope)
        found = [m for m in source if all(t(m) for t in tests)] if tests else list(source)
        if q.recent_n is not None:
            found = found[len(found) - q.recent_n :] if q.recent_n else []
        return found

    def _search(self, q: Search) -> list[Message]:
        query = q.query.strip()
        if not query:
            raise MemoryInputError("search needs a non-empty query")
        if q.k is not None and q.k < 1:
            raise MemoryInputError(f"search: k must be >= 1, got {q.k}")
        source = self._source(q.scope)
        if q.roles is not None:
            roles = set(q.roles)
            source = [m for m in source if m.role in roles]
        if q.mode == "substring":
            needle = query.casefold()
            hits = [m for m in source if needle in m.searchable_text().casefold()]
            return hits[-q.k :] if q.k is not None else hits
        if q.mode != "ranked":
            raise MemoryInputError(f"search mode must be 'substring' or 'ranked', got {q.mode!r}")
        index = self._index(q.scope, source, q.roles is None)
        return [source[i] for i, _ in index.top(query, q.k or DEFAULT_SEARCH_K)]

    def _index(self, scope: str, source: list[Message], cacheable: bool) -> BM25:
        if not cacheable:
            return BM25([m.searchable_text() for m in source])
        key = (scope, self._version, len(source))
        if self._bm25 is not None and self._bm25[0] == key:
            return self._bm25[1]
        index = BM25([m.searchable_text() for m in source])
        self._bm25 = (key, index)
        return index

    async def _context(self, max_tokens: int | None, query: str | None) -> list[dict[str, Any]]:
        budget = self._config.max_tokens if max_tokens is None else max_tokens
        if budget <= REPLY_PRIMING_TOKENS:
            raise MemoryInputError(
                f"context: max_tokens must be > {REPLY_PRIMING_TOKENS} (the reply priming "
                f"every request pays), got {budget}"
            )
        working = self._working
        head = leading_system_count(working)
        remaining = budget - REPLY_PRIMING_TOKENS - sum(m.tokens for m in working[:head])
        if remaining < 0:
            raise ContextBudgetError(
                f"context: the system messages alone need {budget - remaining} tokens "
                f"with the reply priming; the budget is {budget}"
            )
        # A share of the budget is kept for the recall blocks (core memory, insights,
        # long-term memories), filled after the conversation is picked so that
        # nothing already in the context is repeated there.
        if self._unobserved:
            self.recall  # noqa: B018 (made now: the messages so far feed core memory)
        reserve = int(remaining * BLOCK_SHARE) if self._recall is not None else 0
        remaining -= reserve
        # Walk back from the newest message, one unit at a time, until the budget
        # is spent: a tool result waits in ``answers`` until its assistant message
        # is reached, so a call and its results are taken or dropped together.
        picked: list[list[Message]] = []
        answers: dict[str, Message] = {}
        i = len(working) - 1
        while i >= head:
            m = working[i]
            i -= 1
            if m.role == "tool":
                answers[m.tool_call_id or ""] = m
                continue
            if m.tool_calls:
                unit = [m]
                for call in m.tool_calls:
                    answer = answers.pop(call.id, None)
                    if answer is None:
                        break
                    unit.append(answer)
                else:
                    cost = sum(x.tokens for x in unit)
                    if cost > remaining:
                        break
                    remaining -= cost
                    picked.append(unit)
                # A call still waiting for results cannot be sent: skip the unit.
                continue
            if m.tokens > remaining:
                break
            remaining -= m.tokens
            picked.append([m])
        out = [m.to_openai() for m in working[:head]]
        if reserve > BLOCK_FRAMING and self._recall is not None:
            shown = {m.id for unit in picked for m in unit}
            blocks = await self._recall.blocks(
                self._latest_query() if query is None else query,
                reserve - BLOCK_FRAMING,
                self._counter,
                shown,
                # The window is fixed by the view (its version and length) and budget.
                exclude_key=(self._version, len(working), budget),
            )
            if blocks:
                recall = {"role": "system", "content": "\n\n".join(blocks)}
                if self._counter.count_message(recall) <= reserve:
                    out.append(recall)
        for unit in reversed(picked):
            out.extend(m.to_openai() for m in unit)
        return out

    def _latest_query(self) -> str:
        """The newest user or agent_call text: what recall is ranked for by default."""
        working = self._working
        for i in range(len(working) - 1, -1, -1):
            if working[i].role in ("user", "agent_call"):
                return working[i].text()
        return ""

    def _stats(self) -> MemoryStats:
        recall = self.recall if self._unobserved else self._recall
        return MemoryStats(
            size=len(self._working),
            history_size=len(self._history),
            working_tokens=self._working_tokens,
            history_tokens=self._history_tokens,
            offloaded=len(self._offloaded),
            insights_held=len(recall.inbox) if recall else 0,
            longterm_entries=len(recall.longterm.entries()) if recall else 0,
            episodes=len(recall.episodes.episodes()) if recall else 0,
            core_messages=len(recall.episodes.core()) if recall else 0,
            compressions=self._compressions,
            tokens_saved=self._tokens_saved,
            compressing=self._compressing,
            peak_working_tokens=self._peak_tokens,
            peak_size=self._peak_size,
        )

    def _export(self, include_history: bool) -> MemoryExport:
        return MemoryExport(
            agent=self.agent,
            working=list(self._working),
            history=list(self._history) if include_history else [],
            offloaded={k: list(v) for k, v in self._offloaded.items()},
            exported_at=time.time(),
        )

    def _reload(self, offload_id: str) -> list[Message]:
        found = self._offloaded.get(offload_id)
        if found is None:
            raise MemoryInputError(f"reload: no offloaded content with id {offload_id!r}")
        return list(found)

    # -- durable state (the Redis transport's protocol, actormem.runtime.redis.durable) ---------

    def durable_changes(self) -> tuple[list[bytes], bytes | None]:
        """History messages added since the last call, and the rest as a snapshot when
        it changed beyond what replaying those adds restores (see :meth:`durable_restore`).

        A plain add (the common command) thus stores only its messages: the cost of a
        commit does not grow with the agent's working view or recall.
        """
        appends = [encode_message(m) for m in self._log_pending]
        self._log_pending = []
        recall = self._recall
        edits = recall.edits if recall is not None else 0
        if not self._dirty and edits == self._saved_edits:
            return appends, None
        self._dirty = False
        self._saved_edits = edits
        in_history = self._history_ids
        snapshot = _Snapshot(
            working=[m.id for m in self._working],
            extra=[m for m in self._working if m.id not in in_history],
            offloaded=self._offloaded,
            history_skip=self._history_skip,
            version=self._version,
            recall=recall.component_states() if recall is not None else {},
            compressions=self._compressions,
            tokens_saved=self._tokens_saved,
            peak_tokens=self._peak_tokens,
            peak_size=self._peak_size,
            log_mark=self._history_skip + len(self._history),
            unobserved=None if recall is not None else [m.id for m in self._unobserved or ()],
            awaiting_reply=[m.id for m in recall.awaiting_reply] if recall is not None else [],
        )
        return appends, _snapshot_encoder.encode(snapshot)

    def durable_restore(self, snapshot: bytes | None, log: list[bytes]) -> None:
        """Rebuild the memory from what the transport stored (on activation): the
        snapshot, then the messages added after it, replayed as the adds they were."""
        self._durable = True
        if snapshot:
            state = _snapshot_decoder.decode(snapshot)
        else:  # only plain adds so far: replay the whole log
            state = _Snapshot(working=[], log_mark=0, unobserved=[])
        skip = self._history_skip = state.history_skip
        history = [decode_message(entry) for entry in log[skip:]]
        mark = len(log) if state.log_mark < 0 else min(max(state.log_mark, skip), len(log))
        replay = history[mark - skip :]
        self._history = history
        self._history_ids = {m.id for m in history}
        self._history_tokens = sum(m.tokens for m in history)
        by_id = {m.id: m for m in history}
        by_id.update((m.id, m) for m in state.extra)
        self._working = [by_id[i] for i in state.working if i in by_id] + replay
        self._working_tokens = sum(m.tokens for m in self._working)
        self._offloaded = state.offloaded
        self._version = state.version
        self._compressions = state.compressions
        self._tokens_saved = state.tokens_saved
        self._peak_tokens = state.peak_tokens
        self._peak_size = state.peak_size
        self._note_peak()
        if state.unobserved is not None:
            unobserved = [by_id[i] for i in state.unobserved if i in by_id] + replay
            self._unobserved = unobserved or None
        else:
            if state.recall:
                self.recall.load_component_states(state.recall)
            if state.awaiting_reply:
                self.recall.awaiting_reply = [by_id[i] for i in state.awaiting_reply if i in by_id]
            if replay:
                self.recall.observe(replay)
            self._saved_edits = self._recall.edits if self._recall is not None else 0
        self._dirty = False


class _Conversation:
    """The conversation (working view, history, offloads) as a retention component."""

    __slots__ = ("_memory",)

    def __init__(self, memory: AgentMemory) -> None:
        self._memory = memory

    def export_state(self) -> MemoryExport:
        return self._memory._export(include_history=True)

    def load_state(self, state: MemoryExport) -> None:
        self._memory._load(state, overwrite=True)

    def clear(self) -> None:
        self._memory._clear(history=True)


def memory_factory(
    config: AppConfig, deployment: str = ""
) -> Callable[[ActorContext], AgentMemory]:
    """Return the factory the runtime calls to activate an agent's memory actor
    (``deployment``: see :class:`~actormem.actors.pool.vouch.AgentVoucher`)."""
    counter = get_counter(config.memory.encoding)
    recall = RecallConfig(
        pool=config.pool,
        longterm=config.longterm,
        episodes=config.episodes,
        retention=config.retention,
    )
    # Embeddings make retrieval await the network, so receive may suspend: asks
    # must then go through the mailbox instead of running inline.
    cls = AgentMemory if not config.longterm.embedding_base_url else _SuspendingAgentMemory
    voucher = config.pool.voucher(deployment)

    def make(ctx: ActorContext) -> AgentMemory:
        return cls(ctx, config, recall, counter, voucher)

    return make


class _SuspendingAgentMemory(AgentMemory):
    inline_asks = False
