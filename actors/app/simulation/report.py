"""The simulation's report: what each agent holds at the end, and the run's totals."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import msgspec

from actormem.actors.app.simulation.facts import FactIndex
from actormem.actors.app.simulation.goals import GoalScore
from actormem.actors.app.simulation.spread import SpreadReport
from actormem.actors.app.simulation.town import PlantedFact
from actormem.actors.app.wiring import MemoryRuntime
from actormem.actors.config import AppConfig
from actormem.actors.memory.handle import MemoryHandle
from actormem.actors.pool.commands import PoolStats
from actormem.runtime import RuntimeStats, get_counter
from actormem.runtime.config import redacted

__all__ = (
    "AgentReport",
    "SimulationReport",
    "build_report",
    "known_share",
    "measure",
    "package_version",
    "report_dict",
)


class AgentReport(msgspec.Struct, frozen=True, kw_only=True):
    """One agent at the end of the run."""

    agent: str
    messages: int
    history_tokens: int
    context_tokens: int
    facts: int
    found_by_search: int
    found_in_context: int
    found: int
    known_before_sharing: float
    known_after_sharing: float
    found_by_reload: int = 0
    compressions: int = 0
    tokens_saved: int = 0
    peak_working_tokens: int = 0
    peak_messages: int = 0


class SimulationReport(msgspec.Struct, frozen=True, kw_only=True):
    """What ``actormem simulate`` prints (and writes with ``--json``).

    ``partial`` is true when the run was asked to stop: ``steps_completed`` may be
    less than ``steps``, and ``per_agent`` may leave out agents that could not be
    measured in time. ``brain`` is the brain's kind (``python:<module:callable>``
    for a user's own); the ``llm_*`` figures count the model calls of the turns
    (retries included), and the tokens the endpoint reported. ``turn_seconds`` sums
    the agents' turns (they overlap: more than ``elapsed_s``), of which
    ``memory_seconds`` went waiting for memory commands and ``llm_seconds`` for
    the model: ``memory_share`` and ``llm_share`` of it (the rest is the brains'
    own work, and waiting for a free model request slot). ``version`` is
    actormem's, ``started_at`` when the steps began (UTC, ISO 8601), ``workers``
    the worker processes the agents' memories ran in (0: this process), and
    ``config`` the run's whole config (secrets shown as ``***``). ``scenario`` is
    the scenario's name (its file's stem; ``town`` built in), ``goals`` the score
    of each of its goal questions, and the ``goals_*`` figures their sums.
    ``actor_failures`` and ``actor_restarts`` are the handler crashes and
    supervision restarts of this process and of every worker (``runtime`` holds
    this process's alone). ``spread`` is how the facts told spread from agent to
    agent (:class:`~actormem.actors.app.simulation.spread.SpreadReport`), measured
    by the run's timeline: None for a run without a run directory.
    ``pool_delivery`` is how the pool delivered (``broadcast`` or ``feed``) and
    ``deliveries_per_share`` the insights delivered per new insight shared.
    ``pool_seconds`` is the turns' time in pool commands (``pool_share`` of it),
    and ``feed_seconds`` the time the feeds took at the ends of the steps.
    ``own_ms_per_model_call_p50`` and ``_p99`` are the runtime's own time per model
    call: over the turns that called the model, the turn's time not spent waiting
    for the model (nor for a free request slot or a retry), divided by its calls,
    in milliseconds (0.0: no model calls). ``compressions_in_flight_after_steps``
    counts the agents whose compression was still in flight (running or queued for
    a compressor) when the steps ended; the run then waited ``compressions_wait_s``
    seconds for them before measuring, and ``compressions_queued_at_end`` counts
    those still in flight after the wait (0 unless no round ended for a while, or
    the run stopped).
    """

    agents: int
    steps: int
    seed: int
    transport: str
    messages_processed: int
    commands: int
    elapsed_s: float
    messages_per_s: float
    tokens_stored: int
    tokens_in_final_contexts: int
    context_budget: int
    facts_planted: int
    facts_found_by_search: int
    facts_found_in_context: int
    facts_found: int
    facts_found_by_reload: int
    compressions: int
    tokens_saved: int
    compression_budget_tokens: int
    compression_budget_messages: int
    peak_working_tokens: int
    peak_working_messages: int
    agents_over_budget: int
    insights_shared: int
    insights_deduplicated: int
    insights_delivered: int
    facts_known_before_sharing: float
    facts_known_after_sharing: float
    runtime: RuntimeStats
    per_agent: list[AgentReport]
    run_id: str = ""
    steps_completed: int = 0
    partial: bool = False
    brain: str = "scripted"
    llm_calls: int = 0
    llm_retries: int = 0
    llm_tokens_in: int = 0
    llm_tokens_out: int = 0
    turn_seconds: float = 0.0
    memory_seconds: float = 0.0
    llm_seconds: float = 0.0
    version: str = ""
    started_at: str = ""
    workers: int = 0
    config: dict[str, Any] = msgspec.field(default_factory=dict)
    scenario: str = "town"
    goals: list[GoalScore] = msgspec.field(default_factory=list)
    goals_asked: int = 0
    goals_answered_by_search: int = 0
    goals_answered_by_retrieve: int = 0
    goals_answered: int = 0
    memory_share: float = 0.0
    llm_share: float = 0.0
    actor_failures: int = 0
    actor_restarts: int = 0
    spread: SpreadReport | None = None
    pool_delivery: str = "broadcast"
    deliveries_per_share: float = 0.0
    pool_seconds: float = 0.0
    pool_share: float = 0.0
    feed_seconds: float = 0.0
    own_ms_per_model_call_p50: float = 0.0
    own_ms_per_model_call_p99: float = 0.0
    compressions_in_flight_after_steps: int = 0
    compressions_queued_at_end: int = 0
    compressions_wait_s: float = 0.0


async def known_share(
    handle: MemoryHandle, facts: list[PlantedFact], index: FactIndex | None = None
) -> float:
    """The share of ``facts`` whose answer this agent holds: in its history or insights
    (looked up as :class:`~actormem.actors.app.simulation.facts.FactIndex` does;
    ``index``: theirs, made once for many agents)."""
    if not facts:
        return 0.0
    index = index if index is not None else FactIndex(facts)
    texts = [m.text() for m in await handle.get(scope="history")]
    texts += [i.text for i in await handle.held_insights(k=10_000)]
    return len(index.found("\n".join(texts))) / len(index)


async def measure(
    rt: MemoryRuntime,
    config: AppConfig,
    names: list[str],
    by_agent: dict[str, list[PlantedFact]],
    facts: list[PlantedFact],
    known_before: dict[str, float],
    per_agent: list[AgentReport],
    *,
    on_measured: Callable[[int], None] | None = None,
) -> None:
    """Append each agent's report to ``per_agent``, one agent after another
    (``on_measured`` is called with how many are done after each)."""
    sim = config.simulation
    counter = get_counter(config.memory.encoding)
    handles = {n: rt.memory(n) for n in names}
    index = FactIndex(facts)
    for name in names:
        me = handles[name]
        stats = await me.stats()
        context = await me.context(sim.context_tokens)
        context_text = "\n".join(str(m.get("content") or "") for m in context)
        by_search = in_context = by_reload = found = 0
        for fact in by_agent[name]:
            hits = await me.search(fact.query)
            searched = any(fact.answer in m.text() for m in hits)
            seen = fact.answer in context_text
            # What compression offloaded, the agent gets back with reload(id).
            offloaded = await me.search(fact.answer, scope="offloaded")
            reloaded = any(fact.answer in m.text() for m in offloaded)
            by_search += searched
            in_context += seen
            by_reload += reloaded
            found += searched or seen or reloaded
        after = await known_share(me, facts, index)
        per_agent.append(
            AgentReport(
                agent=name,
                messages=stats.size,
                history_tokens=stats.history_tokens,
                context_tokens=counter.count_messages(context),
                facts=len(by_agent[name]),
                found_by_search=by_search,
                found_in_context=in_context,
                found=found,
                known_before_sharing=known_before.get(name, after),
                known_after_sharing=after,
                found_by_reload=by_reload,
                compressions=stats.compressions,
                tokens_saved=stats.tokens_saved,
                peak_working_tokens=stats.peak_working_tokens,
                peak_messages=stats.peak_size,
            )
        )
        if on_measured is not None:
            on_measured(len(per_agent))


def build_report(
    config: AppConfig,
    per_agent: list[AgentReport],
    pool: PoolStats | None,
    runtime: RuntimeStats,
    **totals: Any,
) -> SimulationReport:
    """The report of a run: the agents' own reports summed up, with ``totals``, the
    report fields the run counted itself (``messages_processed``, ``commands``,
    ``elapsed_s``, ``transport``, ``facts_planted``, ``steps_completed``,
    ``partial``, ``started_at``, ``brain``, the ``llm_*`` figures, the
    ``*_seconds``, ``scenario``, ``goals`` and ``spread``; ``own_ms_per_model_call``,
    the milliseconds of each model-calling turn per call, becomes its p50 and p99)."""
    sim = config.simulation
    own = _p50_p99(totals.pop("own_ms_per_model_call", ()))
    totals.setdefault("own_ms_per_model_call_p50", own[0])
    totals.setdefault("own_ms_per_model_call_p99", own[1])
    messages, elapsed = totals["messages_processed"], totals["elapsed_s"]
    goals: list[GoalScore] = totals.get("goals", [])
    totals.setdefault("goals_asked", sum(g.asked for g in goals))
    totals.setdefault("goals_answered_by_search", sum(g.by_search for g in goals))
    totals.setdefault("goals_answered_by_retrieve", sum(g.by_retrieve for g in goals))
    totals.setdefault("goals_answered", sum(g.answered for g in goals))
    totals.setdefault("version", package_version())
    turns = totals.get("turn_seconds", 0.0)
    if turns > 0:
        totals.setdefault("memory_share", round(totals.get("memory_seconds", 0.0) / turns, 4))
        totals.setdefault("llm_share", round(totals.get("llm_seconds", 0.0) / turns, 4))
        totals.setdefault("pool_share", round(totals.get("pool_seconds", 0.0) / turns, 4))
    totals.setdefault("config", msgspec.to_builtins(redacted(config)))
    totals.setdefault("actor_failures", runtime.failures)
    totals.setdefault("actor_restarts", runtime.restarts)
    return SimulationReport(
        agents=sim.agents,
        steps=sim.steps,
        seed=sim.seed,
        messages_per_s=round(messages / elapsed, 1) if elapsed > 0 else 0.0,
        tokens_stored=sum(a.history_tokens for a in per_agent),
        tokens_in_final_contexts=sum(a.context_tokens for a in per_agent),
        context_budget=sim.context_tokens,
        facts_found_by_search=sum(a.found_by_search for a in per_agent),
        facts_found_in_context=sum(a.found_in_context for a in per_agent),
        facts_found=sum(a.found for a in per_agent),
        facts_found_by_reload=sum(a.found_by_reload for a in per_agent),
        compressions=sum(a.compressions for a in per_agent),
        tokens_saved=sum(a.tokens_saved for a in per_agent),
        compression_budget_tokens=config.compression.max_tokens,
        compression_budget_messages=config.compression.msg_threshold,
        peak_working_tokens=max((a.peak_working_tokens for a in per_agent), default=0),
        peak_working_messages=max((a.peak_messages for a in per_agent), default=0),
        agents_over_budget=sum(
            a.peak_working_tokens > config.compression.max_tokens for a in per_agent
        ),
        insights_shared=pool.shared if pool else 0,
        insights_deduplicated=pool.deduplicated if pool else 0,
        insights_delivered=pool.delivered if pool else 0,
        pool_delivery=config.pool.delivery,
        deliveries_per_share=round(pool.delivered / pool.shared, 2)
        if pool and pool.shared
        else 0.0,
        facts_known_before_sharing=_mean(a.known_before_sharing for a in per_agent),
        facts_known_after_sharing=_mean(a.known_after_sharing for a in per_agent),
        runtime=runtime,
        per_agent=per_agent,
        run_id=sim.run_id,
        **totals,
    )


def package_version() -> str:
    """actormem's version (``0+unknown`` when it is not installed)."""
    try:
        return version("actormem")
    except PackageNotFoundError:
        return "0+unknown"


def _per(part: int, whole: int) -> float:
    return round(part / whole, 2) if whole else 0.0


def _p50_p99(samples: Sequence[float]) -> tuple[float, float]:
    """The median and the 99th percentile of ``samples``, rounded (0.0 for none)."""
    if len(samples) < 2:
        one = round(samples[0], 3) if samples else 0.0
        return one, one
    p99 = statistics.quantiles(samples, n=100, method="inclusive")[98]
    return round(statistics.median(samples), 3), round(p99, 3)


def _mean(values: Iterable[float]) -> float:
    items = list(values)
    return round(sum(items) / len(items), 4) if items else 0.0


def report_dict(report: SimulationReport) -> dict[str, Any]:
    """The report as plain JSON-able data."""
    return msgspec.to_builtins(report)  # type: ignore[no-any-return]
