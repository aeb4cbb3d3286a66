"""The offline multi-agent simulation: a town of agents talking through their memories.

A seeded, scripted "brain" stands in for an LLM, so a run needs no network and
the same seed tells the same story. Each step every agent reads its
``context()`` as an LLM agent would before speaking, sometimes calls a tool,
says something to another agent (an ``agent_call`` in the listener's memory,
answered by an ``agent_response``), and early on each agent is told a few
*planted facts*. At the end the report says how many of them each agent can
still find, through ``search`` and in its final ``context()``.

A run asked to stop early (``stop``) takes no new step, lets the turns in flight
finish for up to :data:`DRAIN_S` seconds, and reports on what it did: a *partial*
report, whose agents are measured for up to :data:`PARTIAL_REPORT_S` seconds (the
agents not measured by then are left out of ``per_agent``).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterable
from typing import Any, Final

import anyio
import msgspec
import structlog

from actormem.actors.app.runs import for_run, new_run_id
from actormem.actors.app.wiring import MemoryRuntime
from actormem.actors.config import AppConfig
from actormem.actors.memory.handle import MemoryHandle
from actormem.actors.messages import Message, ToolCall
from actormem.actors.pool.commands import GetPoolStats, PoolStats
from actormem.runtime import RuntimeStats, get_counter

__all__ = (
    "DRAIN_S",
    "PARTIAL_REPORT_S",
    "AgentReport",
    "PlantedFact",
    "SimulationReport",
    "plant_facts",
    "run_simulation",
)

#: How long the turns in flight may take to finish once a run is asked to stop.
DRAIN_S: Final = 1.0
#: How long a stopped run may take to measure its agents for the partial report.
PARTIAL_REPORT_S: Final = 3.0

_FIRST: Final = (
    "Ada", "Bram", "Cleo", "Dario", "Edda", "Finn", "Greta", "Hugo", "Ines", "Jonas",
    "Kira", "Lars", "Mira", "Nils", "Olga", "Pavel", "Quinn", "Rosa", "Sven", "Tove",
    "Ulla", "Viktor", "Wanda", "Xaver", "Yara", "Zeno",
)  # fmt: skip
_JOBS: Final = (
    "baker", "blacksmith", "librarian", "fisher", "healer", "carpenter", "merchant",
    "teacher", "guard", "gardener", "brewer", "weaver",
)  # fmt: skip
_PLACES: Final = (
    "mill", "harbour", "chapel", "market", "forge", "library", "orchard", "bridge",
    "tavern", "granary", "watchtower", "bathhouse", "quarry", "stables", "pier",
)  # fmt: skip
_THINGS: Final = (
    "lock code", "hidden key", "spare lantern", "old map", "ledger", "signal flag",
    "bell rope", "seed vault", "tide chart", "cellar door", "weather vane", "strongbox",
)  # fmt: skip
_TOPICS: Final = (
    "the harvest", "the storm last week", "the festival", "a missing goat", "the new well",
    "prices at the market", "the ferry schedule", "the mayor's speech", "a strange light",
)  # fmt: skip
log = structlog.get_logger("actormem.simulation")

_TOOLS: Final = ("check_weather", "look_up_ledger", "count_inventory", "read_notice_board")


class PlantedFact(msgspec.Struct, frozen=True):
    """A fact told to one agent: found when a search for ``query`` returns ``answer``."""

    agent: str
    statement: str
    query: str
    answer: str
    topic: str = "town"


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
    measured in time.
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


def agent_names(n: int) -> list[str]:
    """Return ``n`` distinct, readable agent names."""
    names = []
    for i in range(n):
        base = _FIRST[i % len(_FIRST)]
        names.append(base if i < len(_FIRST) else f"{base}{i // len(_FIRST) + 1}")
    return names


def plant_facts(names: list[str], per_agent: int, seed: int) -> list[PlantedFact]:
    """Make ``per_agent`` unique facts for each agent (the same for the same seed)."""
    rng = random.Random(f"facts-{seed}")
    pairs = [(t, p) for t in _THINGS for p in _PLACES]
    rng.shuffle(pairs)
    facts = []
    k = 0
    for name in names:
        for _ in range(per_agent):
            thing, place = pairs[k % len(pairs)]
            round_ = k // len(pairs)
            where = place if round_ == 0 else f"{place} no. {round_ + 1}"
            answer = f"{rng.randrange(1000, 9999)}-{rng.choice('ABCDEFGHJKLMNPQRSTUVWXYZ')}"
            facts.append(
                PlantedFact(
                    agent=name,
                    statement=f"Remember this: the {thing} of the {where} is {answer}.",
                    query=f"{thing} of the {where} is",
                    answer=answer,
                    topic=place,
                )
            )
            k += 1
    return facts


class _Brain:
    """The scripted stand-in for an LLM: deterministic per agent and seed."""

    def __init__(self, name: str, job: str, seed: int, names: list[str]) -> None:
        self.name = name
        self.job = job
        self.rng = random.Random(f"{seed}-{name}")
        self.others = [n for n in names if n != name]

    def partner(self) -> str:
        return self.rng.choice(self.others) if self.others else self.name

    def line(self, step: int) -> str:
        topic = self.rng.choice(_TOPICS)
        place = self.rng.choice(_PLACES)
        mood = self.rng.choice(("worried", "cheerful", "curious", "tired", "hopeful"))
        return (
            f"Step {step}: as the {self.job}, I am {mood} about {topic}; I saw it near the {place}."
        )

    def reply(self, caller: str) -> str:
        topic = self.rng.choice(_TOPICS)
        return f"Thanks, {caller}. I heard something about {topic} too."

    def tool_call(self, step: int) -> tuple[ToolCall, str]:
        tool = self.rng.choice(_TOOLS)
        place = self.rng.choice(_PLACES)
        call = ToolCall(
            id=f"call-{self.name}-{step}",
            name=tool,
            arguments=json.dumps({"place": place, "step": step}),
        )
        result = json.dumps({"place": place, "value": self.rng.randrange(1, 500), "ok": True})
        return call, result


async def known_share(handle: MemoryHandle, facts: list[PlantedFact]) -> float:
    """The share of ``facts`` whose answer this agent holds: in its history or insights."""
    texts = [m.text() for m in await handle.get(scope="history")]
    texts += [i.text for i in await handle.held_insights(k=10_000)]
    corpus = "\n".join(texts)
    return sum(f.answer in corpus for f in facts) / len(facts) if facts else 0.0


async def run_simulation(
    config: AppConfig,
    *,
    on_step: Callable[[int], None] | None = None,
    runtime: MemoryRuntime | None = None,
    stop: anyio.Event | None = None,
) -> SimulationReport:
    """Run the simulation ``config.simulation`` describes and return its report.

    Every run has a run id: ``config.simulation.run_id``, else a new one. Opening
    its own runtime, the run keeps its Redis keys in the run's namespace
    (:func:`actormem.actors.app.runs.for_run`), so runs never see each other's
    messages and the same id resumes a run.

    Args:
        config: the app config (runtime, memory and simulation sections).
        on_step: called after each step with the step number (progress bars).
        runtime: an open runtime to use instead of opening one from ``config``
            (its keys are where its maker put them: ``for_run`` makes the config of
            a run's runtime).
        stop: set it to stop the run early; the report is then partial.
    """
    if runtime is None:
        config = for_run(config, config.simulation.run_id or new_run_id())
        async with MemoryRuntime(config) as rt:
            return await _run(config, rt, on_step, stop or anyio.Event())
    if not config.simulation.run_id:
        run_id = runtime.namespace or new_run_id()
        config = msgspec.structs.replace(
            config, simulation=msgspec.structs.replace(config.simulation, run_id=run_id)
        )
    return await _run(config, runtime, on_step, stop or anyio.Event())


async def _cancel_when_set(stop: anyio.Event, scope: anyio.CancelScope, delay: float) -> None:
    await stop.wait()
    await anyio.sleep(delay)
    scope.cancel()


async def _run(
    config: AppConfig,
    rt: MemoryRuntime,
    on_step: Callable[[int], None] | None,
    stop: anyio.Event,
) -> SimulationReport:
    sim = config.simulation
    names = agent_names(sim.agents)
    facts = plant_facts(names, sim.facts_per_agent, sim.seed)
    by_agent: dict[str, list[PlantedFact]] = {n: [] for n in names}
    for fact in facts:
        by_agent[fact.agent].append(fact)
    brains = {n: _Brain(n, _JOBS[i % len(_JOBS)], sim.seed, names) for i, n in enumerate(names)}
    handles = {n: rt.memory(n) for n in names}
    commands = 0
    messages = 0
    limiter = anyio.CapacityLimiter(sim.concurrency)

    async def add(handle: MemoryHandle, batch: list[Message]) -> None:
        nonlocal commands, messages
        await handle.add(batch)
        commands += 1
        messages += len(batch)

    async def introduce(name: str) -> None:
        await handles[name].subscribe()  # every topic: the town hears all news
        brain = brains[name]
        await add(
            handles[name],
            [
                Message(
                    role="system",
                    content=f"You are {name}, the town's {brain.job}. Speak plainly.",
                    metadata={"pinned": True},
                )
            ],
        )

    async def turn(name: str, step: int) -> None:
        nonlocal commands
        async with limiter:
            brain = brains[name]
            me = handles[name]
            await me.context(sim.context_tokens)  # what an LLM agent reads first
            commands += 1
            batch: list[Message] = []
            pending = by_agent[name]
            if step < sim.fact_steps and pending:
                told = pending[step * len(pending) // sim.fact_steps :][:1]
                for fact in told:
                    batch.append(
                        Message(
                            role="user",
                            name="narrator",
                            content=fact.statement,
                            metadata={"category": "fact", "important": True},
                            importance=0.9,
                        )
                    )
            if brain.rng.random() < sim.tool_call_rate:
                call, result = brain.tool_call(step)
                batch.append(Message(role="assistant", tool_calls=(call,)))
                batch.append(
                    Message(role="tool", tool_call_id=call.id, name=call.name, content=result)
                )
            if step == sim.fact_steps:  # the facts are told: now the agents share some
                for fact in pending[: sim.share_facts]:
                    await me.share(fact.statement, fact.topic, 0.8)
                    commands += 1
            elif step > sim.fact_steps and brain.rng.random() < sim.gossip_rate:
                heard = await me.held_insights(k=50)
                if heard:
                    rumour = brain.rng.choice(heard)
                    # Passed on as heard, or in other words: the pool drops both as
                    # duplicates (exact, near).
                    text = rumour.text
                    if brain.rng.random() < 0.5:
                        text = text.replace("Remember this:", "Word around town is that")
                    await me.share(text, rumour.topic, 0.5)
                    commands += 2
            partner = brain.partner()
            said = brain.line(step)
            batch.append(Message(role="assistant", name=name, content=said))
            await add(me, batch)
            other = handles[partner]
            answer = brains[partner].reply(name)
            await add(
                other,
                [
                    Message(role="agent_call", name=name, content=said),
                    Message(role="agent_response", name=partner, content=answer),
                ],
            )
            await add(me, [Message(role="user", name=partner, content=answer)])

    known_before: dict[str, float] = {}
    started = time.perf_counter()
    done = 0
    async with anyio.create_task_group() as watch:
        with anyio.CancelScope() as stepping:
            watch.start_soon(_cancel_when_set, stop, stepping, DRAIN_S)
            for name in names:
                await introduce(name)
            log.info(
                "simulation_started",
                run=sim.run_id,
                agents=sim.agents,
                steps=sim.steps,
                seed=sim.seed,
            )
            started = time.perf_counter()
            for step in range(sim.steps):
                if stop.is_set():
                    break
                if step == sim.fact_steps or (step == sim.steps - 1 and not known_before):
                    for name in names:  # before anyone has shared: what each agent knows
                        known_before[name] = await known_share(handles[name], facts)
                async with anyio.create_task_group() as tg:
                    for name in names:
                        tg.start_soon(turn, name, step)
                done = step + 1
                if on_step is not None:
                    on_step(done)
        watch.cancel_scope.cancel()
    elapsed = time.perf_counter() - started
    partial = done < sim.steps
    log.info(
        "simulation_stopped" if partial else "simulation_finished",
        messages=messages,
        commands=commands,
        elapsed_s=elapsed,
        steps=done,
    )
    pool: PoolStats | None = None
    per_agent: list[AgentReport] = []
    async with anyio.create_task_group() as watch:
        with anyio.CancelScope() as measuring:
            watch.start_soon(_cancel_when_set, stop, measuring, PARTIAL_REPORT_S)
            pool = await rt.ask("pool/main", GetPoolStats())
            await _measure(rt, config, names, by_agent, facts, known_before, per_agent)
        watch.cancel_scope.cancel()
    partial = partial or stop.is_set()
    return SimulationReport(
        agents=sim.agents,
        steps=sim.steps,
        seed=sim.seed,
        transport=rt.transport.name,
        messages_processed=messages,
        commands=commands,
        elapsed_s=round(elapsed, 3),
        messages_per_s=round(messages / elapsed, 1) if elapsed > 0 else 0.0,
        tokens_stored=sum(a.history_tokens for a in per_agent),
        tokens_in_final_contexts=sum(a.context_tokens for a in per_agent),
        context_budget=sim.context_tokens,
        facts_planted=len(facts),
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
        facts_known_before_sharing=_mean(a.known_before_sharing for a in per_agent),
        facts_known_after_sharing=_mean(a.known_after_sharing for a in per_agent),
        runtime=rt.stats(),
        per_agent=per_agent,
        run_id=sim.run_id,
        steps_completed=done,
        partial=partial,
    )


async def _measure(
    rt: MemoryRuntime,
    config: AppConfig,
    names: list[str],
    by_agent: dict[str, list[PlantedFact]],
    facts: list[PlantedFact],
    known_before: dict[str, float],
    per_agent: list[AgentReport],
) -> None:
    """Append each agent's report to ``per_agent``, one agent after another."""
    sim = config.simulation
    counter = get_counter(config.memory.encoding)
    handles = {n: rt.memory(n) for n in names}
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
        after = await known_share(me, facts)
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


def _mean(values: Iterable[float]) -> float:
    items = list(values)
    return round(sum(items) / len(items), 4) if items else 0.0


def report_dict(report: SimulationReport) -> dict[str, Any]:
    """The report as plain JSON-able data."""
    return msgspec.to_builtins(report)  # type: ignore[no-any-return]
