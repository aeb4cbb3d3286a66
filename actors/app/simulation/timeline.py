"""A simulation's story over time: one event per thing that happened, one row per step.

The run's memory handles (:class:`~actormem.actors.app.simulation.tally.CountedMemory`)
show the :class:`Timeline` every command and its answer as the turns go; at the end
of each step the run asks it for the step's row (:meth:`Timeline.end_step`), which
asks a few things of the runtime itself (the pool's counters, the memories that may
have compressed, the agents whose knowledge it samples). What it writes goes to a
:class:`Sink` (the run directory).

*Facts known* are measured as the report measures them (a planted fact told so far
is known to an agent when its answer is in the agent's history or in the insights it
holds), on up to :data:`FACTS_SAMPLE` agents: all of them in a smaller run, else a
sample drawn with the run's seed, the same every step. Each step reads only the
history a sampled agent gained since the last (the history only grows) and its held
insights (at most the inbox's size); answers are looked up by their longest word.
What it reads also shows how each fact spread
(:mod:`~actormem.actors.app.simulation.spread`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Final, Protocol

import anyio
import msgspec

from actormem.actors.app.simulation.brains.llm_client import LLMUsage
from actormem.actors.app.simulation.facts import FactIndex
from actormem.actors.app.simulation.spread import FactSpread, Spread
from actormem.actors.app.simulation.town import PlantedFact
from actormem.actors.app.wiring import MemoryRuntime
from actormem.actors.compression.config import CompressionConfig
from actormem.actors.memory.commands import Add, AddResult, ToPool
from actormem.actors.messages import Message
from actormem.actors.pool.commands import Share, ShareResult

__all__ = ("FACTS_SAMPLE", "SETTLE_S", "TEXT_CHARS", "Event", "Sink", "StepRow", "Timeline")

#: The most agents whose facts known are measured each step.
FACTS_SAMPLE: Final = 200
#: An event's text is cut to this many characters (``chars`` says how long it was).
TEXT_CHARS: Final = 160
#: How long the last step's row waits for the compressions still in flight.
SETTLE_S: Final = 2.0
#: Memories asked about their compressions at once, at the end of a step.
_CHECKS_AT_ONCE: Final = 64


class Event(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One line of ``events.jsonl`` (fields a kind does not use are left out).

    ``kind`` is ``message`` (one stored: ``role``, ``name``, ``tokens``, ``text``),
    ``tool_call`` (one call in a stored assistant message: ``tool``, ``call_id``,
    ``text`` its arguments), ``share`` (``topic``, ``status``, ``recipients``,
    ``text``), ``compression`` (applied since the agent's last check:
    ``compressions``, ``tokens_saved``, ``tokens`` its working view after) or
    ``failure`` (``error``; ``count`` when a counter rose). ``step`` is -1 for the
    introductions before the first step; ``t`` is seconds since the run began.
    """

    step: int
    t: float
    agent: str
    kind: str
    role: str | None = None
    name: str | None = None
    tokens: int | None = None
    text: str | None = None
    chars: int | None = None
    tool: str | None = None
    call_id: str | None = None
    topic: str | None = None
    status: str | None = None
    recipients: int | None = None
    compressions: int | None = None
    tokens_saved: int | None = None
    count: int | None = None
    error: str | None = None


class StepRow(msgspec.Struct, frozen=True, kw_only=True):
    """One line of ``timeseries.jsonl``: what one step did (counts of the step, not
    running totals, unless the name says ``_total``; ``spread``: how far each fact
    known to a measured agent has spread by the step's end)."""

    step: int
    t: float
    step_seconds: float
    messages: int
    messages_total: int
    tokens_stored: int
    tokens_working: int
    compressions: int
    tokens_saved: int
    facts_told: int
    facts_known_agents: int
    facts_known_mean: float
    facts_known_min: float
    facts_known_p10: float
    facts_known_median: float
    facts_known_max: float
    insights_shared: int
    insights_delivered: int
    memory_ops: int
    memory_p50_ms: float
    memory_p99_ms: float
    turn_seconds: float
    memory_seconds: float
    llm_calls: int
    llm_retries: int
    llm_tokens_in: int
    llm_tokens_out: int
    llm_seconds: float
    llm_mean_ms: float
    failures: int
    spread: list[FactSpread] = msgspec.field(default_factory=list)


class Sink(Protocol):
    """Where a timeline's lines go."""

    def event(self, event: Event) -> None:
        """Take one event."""
        ...

    def row(self, row: StepRow) -> None:
        """Take one step's row (the events of the step came before it)."""
        ...


class _Totals:
    """A step's counts, and the run's running totals."""

    __slots__ = (
        "durations",
        "insights_shared",
        "memory_seconds",
        "messages",
        "messages_total",
        "tokens_stored",
    )

    def __init__(self) -> None:
        self.durations: list[float] = []
        self.messages = self.messages_total = self.tokens_stored = self.insights_shared = 0
        self.memory_seconds = 0.0


class Timeline:
    """Events and per-step rows of one run.

    Args:
        runtime: the run's runtime (for the end-of-step questions).
        compression: the memories' compression config (when one may have compressed).
        names: the agents, in the run's order.
        told: the facts the narrator told each agent so far (the run fills it in).
        seed: the run's seed (which agents' facts known are sampled).
        sink: where the events and rows go.
        usage: the model calls' counters (None: no model).
        could: who could know a fact, for its spread (None: every agent).
    """

    def __init__(
        self,
        runtime: MemoryRuntime,
        compression: CompressionConfig,
        names: Sequence[str],
        told: Mapping[str, Sequence[PlantedFact]],
        *,
        seed: int,
        sink: Sink,
        usage: LLMUsage | None = None,
        could: Callable[[PlantedFact], Collection[str]] | None = None,
    ) -> None:
        self._rt = runtime
        self._compression = compression
        self._told = told
        self._sink = sink
        self.usage = usage
        #: The step the events belong to (-1: before the first).
        self.step = -1
        self._started = time.perf_counter()
        self._step_started = self._started
        self._now = _Totals()
        self._working: dict[str, int] = {}
        self._watched: set[str] = set()
        self._compressing: set[str] = set()
        self._compressed: dict[str, tuple[int, int]] = {}
        chosen = list(names)
        if len(chosen) > FACTS_SAMPLE:
            chosen = sorted(random.Random(f"sample-{seed}").sample(chosen, FACTS_SAMPLE))
        self._sampled = {n: [0, 0] for n in chosen}  # agent: [history added, read]
        self._known: dict[str, set[int]] = {n: set() for n in chosen}
        #: How each fact told spread among the measured agents.
        self.spread = Spread(names, chosen, could)
        self._facts = FactIndex()
        self._before = (0, 0, 0, 0, 0.0, 0, 0)  # usage, pool delivered, failures
        self._turn_seconds = 0.0

    async def start_steps(self) -> None:
        """The introductions are over: what comes next belongs to step 0, and counts in
        the rows (the introductions' events have step -1)."""
        self._before = await self._counters()
        self._restart(0)

    async def _counters(self) -> tuple[int, int, int, int, float, int, int]:
        """The model's counters, the pool's deliveries and the failures so far."""
        pool = await self._rt.pool_stats()
        usage = self.usage or LLMUsage()
        return (
            usage.calls,
            usage.retries,
            usage.tokens_in,
            usage.tokens_out,
            usage.seconds,
            pool.delivered,
            self._rt.stats().failures + pool.failed_deliveries,
        )

    def _restart(self, step: int) -> None:
        fresh, now = _Totals(), self._now
        fresh.messages_total, fresh.tokens_stored = now.messages_total, now.tokens_stored
        self._now, self._turn_seconds = fresh, 0.0
        self.step = step
        self._step_started = time.perf_counter()

    def _t(self) -> float:
        return round(time.perf_counter() - self._started, 4)

    def _emit(self, agent: str, kind: str, **fields: Any) -> None:
        self._sink.event(Event(step=self.step, t=self._t(), agent=agent, kind=kind, **fields))

    # -- as the turns go ----------------------------------------------------------------

    def command(
        self, agent: str, command: Any, answer: Any, seconds: float, error: BaseException | None
    ) -> None:
        """Note one memory command of ``agent``: its answer, or the error it raised."""
        now = self._now
        now.durations.append(seconds)
        now.memory_seconds += seconds
        if error is not None:
            self._emit(agent, "failure", error=_cut(f"{type(error).__name__}: {error}")[0])
            return
        if isinstance(command, Add) and isinstance(answer, AddResult):
            self._stored(agent, command.messages, answer)
        elif isinstance(command, ToPool) and isinstance(command.command, Share):
            result = answer if isinstance(answer, ShareResult) else None
            if result is None:  # over Redis the pool's answer arrives as plain values
                result = msgspec.convert(answer, ShareResult)
            now.insights_shared += result.status == "new"
            text, chars = _cut(command.command.text)
            self._emit(
                agent,
                "share",
                topic=command.command.topic,
                status=result.status,
                recipients=result.recipients,
                text=text,
                chars=chars,
            )

    def turn_took(self, seconds: float) -> None:
        """Note that one agent's turn took ``seconds``."""
        self._turn_seconds += seconds

    def _stored(self, agent: str, messages: Sequence[Message], result: AddResult) -> None:
        now = self._now
        now.messages += len(messages)
        now.messages_total += len(messages)
        now.tokens_stored += sum(result.tokens)
        self._working[agent] = result.working_tokens
        if agent in self._sampled:
            self._sampled[agent][0] += len(result.ids)
        cfg = self._compression
        if cfg.enabled and cfg.over_budget(result.size, result.working_tokens):
            self._watched.add(agent)
        for message, tokens in zip(messages, result.tokens, strict=False):
            text, chars = _cut(message.text())
            self._emit(
                agent,
                "message",
                role=message.role,
                name=message.name,
                tokens=tokens,
                text=text,
                chars=chars,
            )
            for call in message.tool_calls:
                args, args_chars = _cut(call.arguments)
                self._emit(
                    agent,
                    "tool_call",
                    tool=call.name,
                    call_id=call.id,
                    text=args,
                    chars=args_chars,
                )

    # -- at the end of a step ---------------------------------------------------------

    async def end_step(self, step: int, *, last: bool = False) -> StepRow:
        """Ask what the step changed, write its row (and its compression and failure
        events) and return the row; the next events belong to ``step + 1``. After the
        ``last`` step, compressions still in flight are waited for (up to
        :data:`SETTLE_S` seconds), so that the rows add up to the report."""
        ended = time.perf_counter()
        compressions, saved = await self._check_compressions()
        with anyio.move_on_after(SETTLE_S):
            while last and self._compressing:
                await anyio.sleep(0.02)
                more, more_saved = await self._check_compressions()
                compressions, saved = compressions + more, saved + more_saved
        known = await self._facts_known(step)
        calls0, retries0, in0, out0, seconds0, delivered0, failures0 = self._before
        self._before = counters = await self._counters()
        calls1, retries1, in1, out1, seconds1, delivered1, failures = counters
        if failures > failures0:
            self._emit("", "failure", count=failures - failures0, error="actor or delivery")
        now = self._now
        durations = sorted(now.durations)
        known.sort()
        calls, llm_seconds = calls1 - calls0, seconds1 - seconds0
        told = len(self._facts.ids)
        row = StepRow(
            step=step,
            t=round(ended - self._started, 4),
            step_seconds=round(ended - self._step_started, 4),
            messages=now.messages,
            messages_total=now.messages_total,
            tokens_stored=now.tokens_stored,
            tokens_working=sum(self._working.values()),
            compressions=compressions,
            tokens_saved=saved,
            facts_told=told,
            facts_known_agents=len(known),
            facts_known_mean=round(sum(known) / len(known), 4) if known else 0.0,
            facts_known_min=round(_quantile(known, 0.0), 4),
            facts_known_p10=round(_quantile(known, 0.1), 4),
            facts_known_median=round(_quantile(known, 0.5), 4),
            facts_known_max=round(_quantile(known, 1.0), 4),
            insights_shared=now.insights_shared,
            insights_delivered=delivered1 - delivered0,
            memory_ops=len(durations),
            memory_p50_ms=round(1000 * _quantile(durations, 0.5), 3),
            memory_p99_ms=round(1000 * _quantile(durations, 0.99), 3),
            turn_seconds=round(self._turn_seconds, 4),
            memory_seconds=round(now.memory_seconds, 4),
            llm_calls=calls,
            llm_retries=retries1 - retries0,
            llm_tokens_in=in1 - in0,
            llm_tokens_out=out1 - out0,
            llm_seconds=round(llm_seconds, 4),
            llm_mean_ms=round(1000 * llm_seconds / calls, 3) if calls else 0.0,
            failures=failures - failures0,
            spread=self.spread.row(),
        )
        self._sink.row(row)
        self._restart(step + 1)
        return row

    def failed(self, agent: str, error: BaseException) -> None:
        """Note that ``agent``'s brain failed (the run ends with ``error``)."""
        self._emit(agent, "failure", error=_cut(f"{type(error).__name__}: {error}")[0])

    async def _check_compressions(self) -> tuple[int, int]:
        """Ask the memories that went over their budget what they compressed since their
        last check; keep watching those still compressing or over it."""
        self._compressing.clear()
        if not self._watched:
            return 0, 0
        watched, self._watched = sorted(self._watched), set()
        totals = [0, 0]
        limiter = anyio.CapacityLimiter(_CHECKS_AT_ONCE)
        cfg = self._compression

        async def check(agent: str) -> None:
            async with limiter:
                stats = await self._rt.memory(agent).stats()
            count, saved = self._compressed.get(agent, (0, 0))
            if stats.compressions > count:
                self._compressed[agent] = (stats.compressions, stats.tokens_saved)
                totals[0] += stats.compressions - count
                totals[1] += stats.tokens_saved - saved
                self._emit(
                    agent,
                    "compression",
                    compressions=stats.compressions - count,
                    tokens_saved=stats.tokens_saved - saved,
                    tokens=stats.working_tokens,
                )
            self._working[agent] = stats.working_tokens
            if stats.compressing:
                self._compressing.add(agent)
            if stats.compressing or cfg.over_budget(stats.size, stats.working_tokens):
                self._watched.add(agent)

        async with anyio.create_task_group() as tg:
            for agent in watched:
                tg.start_soon(check, agent)
        return totals[0], totals[1]

    async def _facts_known(self, step: int) -> list[float]:
        """Each sampled agent's share of the facts told so far that it knows."""
        facts, spread = self._facts, self.spread
        for told in self._told.values():
            for fact in told:
                facts.add(fact)
        spread.begin(step, facts)
        if not facts.ids:
            return [0.0] * len(self._sampled)
        shares = []
        for agent, seen in self._sampled.items():
            memory = self._rt.memory(agent)
            known = self._known[agent]
            added, read = seen
            if added > read:
                for message in await memory.get(scope="history", recent_n=added - read):
                    found = facts.found(message.text())
                    if found:
                        known |= found
                        spread.heard(agent, message, found)
                seen[1] = added
            held = set()
            for insight in await memory.held_insights(k=10_000):
                found = facts.found(insight.text)
                if found:
                    held |= found
                    spread.fed(agent, insight, found)
            shares.append(len(known | held) / len(facts.ids))
        return shares


def _cut(text: str) -> tuple[str | None, int | None]:
    """``text`` for an event: None when empty; cut, with its length, when long."""
    if not text:
        return None, None
    if len(text) <= TEXT_CHARS:
        return text, None
    return text[:TEXT_CHARS] + "…", len(text)


def _quantile(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile of the sorted ``ordered`` (by nearest rank; 0.0 for none)."""
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
