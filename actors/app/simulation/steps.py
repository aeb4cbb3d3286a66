"""Taking a simulation's steps: each agent's turn, the feeds, and an early stop.

:func:`take_steps` introduces the agents, then runs every step's turns (one at a
time when the run records or replays its model calls). A stop cuts the steps
short after :data:`DRAIN_S` seconds. :mod:`.run` measures what they left.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final

import anyio
import structlog

from actormem.actors.app.simulation.brains import (
    AgentInfo,
    Brain,
    BrainError,
    BrainFactory,
    Crowd,
    Others,
    brain_failed,
)
from actormem.actors.app.simulation.brains.llm_client import model_wait
from actormem.actors.app.simulation.facts import FactIndex
from actormem.actors.app.simulation.report import known_share
from actormem.actors.app.simulation.scenario import Cast
from actormem.actors.app.simulation.tally import Tally
from actormem.actors.app.simulation.town import PlantedFact
from actormem.actors.app.wiring import MemoryRuntime
from actormem.actors.config import AppConfig
from actormem.actors.messages import Message

__all__ = (
    "DRAIN_S",
    "Progress",
    "agent_infos",
    "brain_errors_unwrapped",
    "brain_name",
    "build_brain",
    "cancel_when_set",
    "phase_progress",
    "replayable",
    "take_steps",
)

#: How long the turns in flight may take to finish once a run is asked to stop.
DRAIN_S: Final = 1.0

log = structlog.get_logger("actormem.simulation")


#: ``on_progress(phase, done, total)``: see ``run_simulation`` in :mod:`.run`.
Progress = Callable[[str, int, int], None]


def phase_progress(
    progress: Progress | None, phase: str, total: int
) -> Callable[[int], None] | None:
    """``progress`` for one phase: called with how many are done."""
    if progress is None:
        return None
    return lambda done: progress(phase, done, total)


async def cancel_when_set(stop: anyio.Event, scope: anyio.CancelScope, delay: float) -> None:
    """Cancel ``scope`` ``delay`` seconds after ``stop`` is set."""
    await stop.wait()
    await anyio.sleep(delay)
    scope.cancel()


def _narration(fact: PlantedFact) -> Message:
    return Message(
        role="user",
        name="narrator",
        content=fact.statement,
        metadata={"category": "fact", "important": True},
        importance=0.9,
    )


def build_brain(factory: BrainFactory, agent: AgentInfo) -> Brain:
    """``agent``'s brain, made by ``factory``.

    Raises:
        BrainError: the factory failed (what it raised is the cause).
    """
    try:
        return factory(agent)
    except BrainError:
        raise
    except Exception as exc:
        log.debug("brain_failed", agent=agent.name, exc_info=True)
        raise brain_failed(f"building the brain of {agent.name} failed", exc) from exc


def replayable(config: AppConfig) -> bool:
    """Whether the run records or replays its model calls: its turns then go one at a
    time, each reading a context with its compressions settled, so that every prompt
    follows from the seed and the model's earlier answers alone."""
    brain = config.simulation.brain
    return bool(brain.record or brain.replay)


def brain_name(config: AppConfig) -> str:
    """The brain's name as a run's record shows it."""
    brain = config.simulation.brain
    return f"python:{brain.callable}" if brain.kind == "python" else brain.kind


def agent_infos(cast: Cast, seed: int) -> list[AgentInfo]:
    """What each brain is told about its agent: persona, facts, the others."""
    infos = []
    positions = {n: i for i, n in enumerate(cast.names)}
    for i, n in enumerate(cast.names):
        others = Others(cast.names, i, positions)
        infos.append(
            AgentInfo(
                name=n,
                persona=cast.personas[n],
                index=i,
                seed=seed,
                others=others,
                facts=tuple(cast.facts[n]),
                relations=cast.relations.get(n, others),
            )
        )
    return infos


async def take_steps(
    config: AppConfig,
    rt: MemoryRuntime,
    crowd: Crowd,
    tally: Tally,
    cast: Cast,
    told: dict[str, list[PlantedFact]],
    progress: tuple[Callable[[int], None] | None, Progress | None],
    stop: anyio.Event,
) -> tuple[dict[str, float], int]:
    """Introduce the agents and take the steps (noting in ``told`` the facts the
    narrator told); return what each agent knew before the sharing began, and how
    many steps were taken."""
    sim = config.simulation
    names = crowd.names
    limiter = anyio.CapacityLimiter(sim.concurrency)
    on_step = progress[0]
    on_turn = phase_progress(progress[1], "turns", sim.agents * sim.steps)
    turns = 0

    async def introduce(name: str) -> None:
        # Every topic: the town hears all news (a feed ranks its relations' first).
        await rt.memory(name).subscribe(follows=cast.relations.get(name, ()))
        await crowd.memories[name].add(
            [Message(role="system", content=cast.system(name), metadata={"pinned": True})]
        )

    async def take_turn(name: str, step: int) -> None:
        nonlocal turns
        async with limiter:
            started = time.perf_counter()
            turn = crowd.turn(name, step)
            for fact in cast.told_at(name, step, sim.fact_steps):
                if fact not in told[name]:
                    told[name].append(fact)
                turn.remember(_narration(fact))
            try:
                with model_wait() as waited:
                    await crowd.brains[name].step(turn)
            except BrainError:
                raise
            except Exception as exc:
                if tally.timeline is not None:
                    tally.timeline.failed(name, exc)
                # The user's own brain failing is a user's error: one line, and the
                # traceback in the debug log.
                log.debug("brain_failed", agent=name, step=step, exc_info=True)
                raise brain_failed(f"the brain of {name} failed at step {step}", exc) from exc
            await turn.flush()
            took = time.perf_counter() - started
            tally.turn_seconds += took
            tally.model_turn(took, waited)
            if tally.timeline is not None:
                tally.timeline.turn_took(took)
        turns += 1
        if on_turn is not None:
            on_turn(turns)

    known_before: dict[str, float] = {}
    done = 0
    async with anyio.create_task_group() as watch:
        with anyio.CancelScope() as stepping:
            watch.start_soon(cancel_when_set, stop, stepping, DRAIN_S)
            for name in names:
                await introduce(name)
            # The turns' time is what the report splits; the introductions are no turn.
            tally.memory_seconds = 0.0
            if tally.timeline is not None:
                await tally.timeline.start_steps()
            log.info(
                "simulation_started",
                run=sim.run_id,
                agents=sim.agents,
                steps=sim.steps,
                seed=sim.seed,
                brain=brain_name(config),
            )
            for step in range(sim.steps):
                if stop.is_set():
                    break
                if step == sim.fact_steps or (step == sim.steps - 1 and not known_before):
                    so_far = [f for n in names for f in told[n]]
                    index = FactIndex(so_far)
                    for name in names:  # before anyone has shared: what each agent knows
                        known_before[name] = await known_share(rt.memory(name), so_far, index)
                if replayable(config):
                    for name in names:
                        await take_turn(name, step)
                else:
                    async with anyio.create_task_group() as tg:
                        for name in names:
                            tg.start_soon(take_turn, name, step)
                ticked = time.perf_counter()
                tally.fed += await rt.tick_feeds()
                tally.feed_seconds += time.perf_counter() - ticked
                if tally.timeline is not None:
                    await tally.timeline.end_step(step, last=step == sim.steps - 1)
                done = step + 1
                if on_step is not None:
                    on_step(done)
        watch.cancel_scope.cancel()
    return known_before, done


@contextmanager
def brain_errors_unwrapped() -> Iterator[None]:
    """A brain's error out of the turns' task groups is raised as itself (one line in
    the CLI), not inside an exception group."""
    try:
        yield
    except BaseExceptionGroup as group:
        first = _first_brain_error(group)
        if first is None:
            raise
        raise first from None


def _first_brain_error(group: BaseExceptionGroup[BaseException]) -> BrainError | None:
    for exc in group.exceptions:
        if isinstance(exc, BrainError):
            return exc
        if isinstance(exc, BaseExceptionGroup):
            found = _first_brain_error(exc)
            if found is not None:
                return found
    return None
