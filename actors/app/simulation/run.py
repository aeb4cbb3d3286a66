"""Running a simulation: a scenario's agents talking through their memories.

The scenario (:mod:`actormem.actors.app.simulation.scenario`; the town by
default) names the agents and their relations. Each step every agent's brain
takes its turn (see :mod:`actormem.actors.app.simulation.brains`); a narrator
tells agents their *planted facts* (queued for its memory at the start of its
turn). At the end the report says how many of them each agent can still find,
through ``search`` and in its final ``context()``, and how many of the agents
asked each of the scenario's goal questions answer it
(:mod:`actormem.actors.app.simulation.goals`). The default, scripted brain needs
no network, and the same seed tells the same story.

A run asked to stop early (``stop``) takes no new step, lets the turns in flight
finish for up to :data:`DRAIN_S` seconds, and reports on what it did: a *partial*
report, whose agents are measured for up to :data:`PARTIAL_REPORT_S` seconds (the
agents not measured by then are left out of ``per_agent``).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from typing import Final

import anyio
import msgspec
import structlog

from actormem.actors.app.runs import for_run, new_run_id
from actormem.actors.app.simulation.brains import (
    Crowd,
    brain_factory,
    open_recording,
)
from actormem.actors.app.simulation.brains.llm_client import LLMClient, LLMUsage
from actormem.actors.app.simulation.goals import GoalScore, score_questions
from actormem.actors.app.simulation.report import (
    AgentReport,
    SimulationReport,
    build_report,
    measure,
    package_version,
    report_dict,
)
from actormem.actors.app.simulation.rundir import RunDir, RunInfo
from actormem.actors.app.simulation.scenario import check_scenario
from actormem.actors.app.simulation.spread import reach
from actormem.actors.app.simulation.steps import (
    DRAIN_S,
    Progress,
    agent_infos,
    brain_errors_unwrapped,
    brain_name,
    build_brain,
    cancel_when_set,
    phase_progress,
    replayable,
    take_steps,
)
from actormem.actors.app.simulation.tally import CountedMemory, Tally
from actormem.actors.app.simulation.timeline import Sink, Timeline
from actormem.actors.app.simulation.town import PlantedFact
from actormem.actors.app.wiring import MemoryRuntime
from actormem.actors.config import AppConfig
from actormem.actors.pool.commands import PoolStats
from actormem.runtime.config import redacted
from actormem.runtime.errors import ActormemError
from actormem.runtime.redis import RedisTransport, read_workers_total

__all__ = ("DRAIN_S", "PARTIAL_REPORT_S", "STALL_TIMEOUTS", "run_simulation")

#: How long a stopped run may take to measure its agents for the partial report.
PARTIAL_REPORT_S: Final = 3.0
#: How long a recorded or replayed turn waits for its compressions in flight before
#: it reads its context.
SETTLE_S: Final = 30.0
#: The end of a run waits for the compressions still in flight when its steps end
#: until none has ended for this many times ``[compression] timeout``.
STALL_TIMEOUTS: Final = 2

log = structlog.get_logger("actormem.simulation")


async def run_simulation(
    config: AppConfig,
    *,
    on_step: Callable[[int], None] | None = None,
    on_progress: Progress | None = None,
    runtime: MemoryRuntime | None = None,
    stop: anyio.Event | None = None,
    llm_usage: LLMUsage | None = None,
    run_dir: RunDir | None = None,
    workers: int = 0,
) -> SimulationReport:
    """Run the simulation ``config.simulation`` describes and return its report.

    Every run has a run id: ``config.simulation.run_id``, else a new one. Opening
    its own runtime, the run keeps its Redis keys in the run's namespace
    (:func:`actormem.actors.app.runs.for_run`), so runs never see each other's
    messages and the same id resumes a run.

    Args:
        config: the app config (runtime, memory and simulation sections).
        on_step: called after each step with the step number (progress bars).
        on_progress: called as ``on_progress(phase, done, total)`` after each
            agent's turn (phase ``"turns"``, of agents x steps) and after each agent
            is measured for the report (``"measured"``, of agents), for progress
            bars that move within a step of a large run.
        runtime: an open runtime to use instead of opening one from ``config``
            (its keys are where its maker put them: ``for_run`` makes the config of
            a run's runtime).
        stop: set it to stop the run early; the report is then partial.
        llm_usage: where the model client counts its calls and tokens, for a
            progress display to read while the run goes on.
        run_dir: the run directory to write (:class:`RunDir`; closed at the end):
            ``run.json`` first, the events and the time series as the run goes,
            then the report (a failed run: ``run.json`` with its error).
        workers: the worker processes the memories run in, for the report.

    Raises:
        BrainError: the brain spec is bad (before anything runs), a brain broke the
            protocol, or the model failed for good.
        ConfigError: the scenario is bad (before anything runs).
    """
    watch = (on_step, on_progress)
    stop = stop or anyio.Event()
    if runtime is None:
        config = for_run(config, config.simulation.run_id or new_run_id())
        async with MemoryRuntime(config) as rt:
            return await _recorded(config, rt, watch, stop, llm_usage, run_dir, workers)
    if not config.simulation.run_id:
        run_id = runtime.namespace or new_run_id()
        config = msgspec.structs.replace(
            config, simulation=msgspec.structs.replace(config.simulation, run_id=run_id)
        )
    return await _recorded(config, runtime, watch, stop, llm_usage, run_dir, workers)


async def _recorded(
    config: AppConfig,
    rt: MemoryRuntime,
    progress: tuple[Callable[[int], None] | None, Progress | None],
    stop: anyio.Event,
    llm_usage: LLMUsage | None,
    run_dir: RunDir | None,
    workers: int,
) -> SimulationReport:
    """The run, and its run directory written around it."""
    if run_dir is None:
        return await _run(config, rt, progress, stop, llm_usage, None, workers)
    sim = config.simulation
    info = RunInfo(
        run_id=sim.run_id,
        status="running",
        partial=False,
        version=package_version(),
        seed=sim.seed,
        agents=sim.agents,
        steps=sim.steps,
        steps_completed=0,
        transport=rt.transport.name,
        workers=workers,
        brain=brain_name(config),
        started_at=_utc_now(),
        config=msgspec.to_builtins(redacted(config)),
    )
    try:
        run_dir.info(info)
        try:
            report = await _run(config, rt, progress, stop, llm_usage, run_dir, workers)
        except BaseException as exc:
            info.status, info.partial, info.ended_at = "failed", True, _utc_now()
            info.error = f"{type(exc).__name__}: {exc}"[:400]
            info.steps_completed = run_dir.steps_written
            run_dir.info(info)
            raise
        info.partial = report.partial
        info.status = "stopped" if report.partial else "finished"
        info.steps_completed, info.ended_at = run_dir.steps_written, _utc_now()
        run_dir.report(report_dict(report))
        run_dir.info(info)
        return report
    finally:
        run_dir.close()


def _utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _settler(rt: MemoryRuntime) -> Callable[[str], Awaitable[None]]:
    """What waits (up to :data:`SETTLE_S`) for an agent's compressions in flight to be
    applied, asking its memory uncounted (the report's counts stay the run's own)."""

    async def settle(agent: str) -> None:
        memory = rt.memory(agent)
        with anyio.move_on_after(SETTLE_S):
            # The memory answers asks, and has no event to wait on: poll it.
            while (await memory.stats()).compressing:  # noqa: ASYNC110
                await anyio.sleep(0.005)

    return settle


async def _run(
    config: AppConfig,
    rt: MemoryRuntime,
    progress: tuple[Callable[[int], None] | None, Progress | None],
    stop: anyio.Event,
    llm_usage: LLMUsage | None,
    sink: Sink | None,
    workers: int,
) -> SimulationReport:
    sim = config.simulation
    cast = check_scenario(config)
    factory = brain_factory(config, cast.talk)
    names = cast.names
    facts = [f for n in names for f in cast.facts[n]]
    brains = {info.name: build_brain(factory, info) for info in agent_infos(cast, sim.seed)}
    # Only the facts the narrator told count: a run shorter than fact_steps, or
    # with more facts than fact_steps, leaves some untold.
    told: dict[str, list[PlantedFact]] = {n: [] for n in names}
    tally = Tally()
    memories = {n: CountedMemory(rt, n, tally) for n in names}
    async with AsyncExitStack() as stack:
        llm: LLMClient | None = None
        recorder, replayer = open_recording(sim.brain, package_version())
        if recorder is not None:
            stack.callback(recorder.close)
        if replayer is not None or (sim.brain.base_url and sim.brain.model):
            client = LLMClient(sim.brain, llm_usage, recorder=recorder, replayer=replayer)
            llm = await stack.enter_async_context(client)
            await llm.probe()
        crowd = Crowd(
            memories,
            brains,
            seed=sim.seed,
            context_tokens=sim.context_tokens,
            llm=llm,
            relations=cast.relations,
            settle=_settler(rt) if replayable(config) else None,
        )
        if sink is not None:
            tally.timeline = Timeline(
                rt,
                config.compression,
                names,
                told,
                seed=sim.seed,
                sink=sink,
                usage=llm.usage if llm is not None else None,
                could=reach(cast, sim),
            )
        started = time.perf_counter()
        started_at = _utc_now()
        with brain_errors_unwrapped():
            known_before, done = await take_steps(
                config, rt, crowd, tally, cast, told, progress, stop
            )
        elapsed = time.perf_counter() - started
    partial = done < sim.steps
    log.info(
        "simulation_stopped" if partial else "simulation_finished",
        messages=tally.messages,
        commands=tally.commands,
        elapsed_s=elapsed,
        steps=done,
    )
    told_facts = [f for f in facts if f in told[f.agent]]
    settled = await _compressions_settled(rt, config, names, stop)
    pool: PoolStats | None = None
    per_agent: list[AgentReport] = []
    goals: list[GoalScore] = []
    async with anyio.create_task_group() as watch:
        with anyio.CancelScope() as measuring:
            watch.start_soon(cancel_when_set, stop, measuring, PARTIAL_REPORT_S)
            pool = await rt.pool_stats()
            await measure(
                rt,
                config,
                names,
                told,
                told_facts,
                known_before,
                per_agent,
                on_measured=phase_progress(progress[1], "measured", len(names)),
            )
            await score_questions(rt, cast.questions, goals, concurrency=sim.concurrency)
        watch.cancel_scope.cancel()
    usage = llm.usage if llm is not None else LLMUsage()
    failures, restarts = await _actor_failures(rt, workers)
    return build_report(
        config,
        per_agent,
        pool,
        rt.stats(),
        transport=rt.transport.name,
        messages_processed=tally.messages,
        commands=tally.commands,
        elapsed_s=round(elapsed, 3),
        facts_planted=len(told_facts),
        steps_completed=done,
        partial=partial or stop.is_set(),
        started_at=started_at,
        brain=brain_name(config),
        llm_calls=usage.calls,
        llm_retries=usage.retries,
        llm_tokens_in=usage.tokens_in,
        llm_tokens_out=usage.tokens_out,
        turn_seconds=round(tally.turn_seconds, 3),
        memory_seconds=round(tally.memory_seconds, 3),
        pool_seconds=round(tally.pool_seconds, 3),
        feed_seconds=round(tally.feed_seconds, 3),
        llm_seconds=round(usage.seconds, 3),
        own_ms_per_model_call=tally.own_ms_per_model_call,
        scenario=cast.name,
        goals=goals,
        workers=workers,
        actor_failures=failures,
        actor_restarts=restarts,
        spread=tally.timeline.spread.report() if tally.timeline is not None else None,
        compressions_in_flight_after_steps=settled[0],
        compressions_queued_at_end=settled[1],
        compressions_wait_s=settled[2],
    )


async def _compressions_settled(
    rt: MemoryRuntime, config: AppConfig, names: list[str], stop: anyio.Event
) -> tuple[int, int, float]:
    """Wait for the agents' compressions in flight to be applied, so that the report
    measures views the compressors caught up with. The wait goes on while rounds
    keep ending: it gives up once none has ended for :data:`STALL_TIMEOUTS` times
    ``[compression] timeout`` (each round's own limit), or when ``stop`` is set.
    Return how many agents were compressing when the steps ended, how many still
    are, and the seconds waited."""
    started = time.perf_counter()
    stall = STALL_TIMEOUTS * config.compression.timeout
    limiter = anyio.CapacityLimiter(config.simulation.concurrency)

    async def compressing(agents: Iterable[str]) -> dict[str, int]:
        """The agents still compressing, with the compressions each has applied."""
        busy: dict[str, int] = {}

        async def check(name: str) -> None:
            async with limiter:
                stats = await rt.memory(name).stats()
                if stats.compressing:
                    busy[name] = stats.compressions

        async with anyio.create_task_group() as tg:
            for name in agents:
                tg.start_soon(check, name)
        return busy

    left = await compressing(names)
    in_flight = len(left)
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as watch:
            watch.start_soon(cancel_when_set, stop, scope, 0.0)
            ended = time.perf_counter()
            # The memories answer asks, and have no event to wait on: poll them.
            while left and not stop.is_set() and time.perf_counter() - ended < stall:
                await anyio.sleep(0.1)
                still = await compressing(left)
                if still.keys() != left.keys() or any(still[a] > left[a] for a in still):
                    ended = time.perf_counter()  # a round ended
                left = still
            watch.cancel_scope.cancel()
    if scope.cancel_called:  # cut short: count those still in flight
        left = await compressing(left)
    waited = round(time.perf_counter() - started, 3)
    log.info(
        "simulation_compressions_settled",
        in_flight=in_flight,
        queued=len(left),
        waited_s=waited,
    )
    return in_flight, len(left), waited


async def _actor_failures(rt: MemoryRuntime, workers: int) -> tuple[int, int]:
    """Actor failures and restarts: this process's, plus those of every worker."""
    here = rt.stats()
    transport = rt.transport
    if not workers or not isinstance(transport, RedisTransport):
        return here.failures, here.restarts
    try:
        summed = await read_workers_total(transport)
    except ActormemError as exc:  # the report still comes, with this process's alone
        log.warning("worker_counters_unread", reason=str(exc))
        return here.failures, here.restarts
    return here.failures + summed.failures, here.restarts + summed.restarts
