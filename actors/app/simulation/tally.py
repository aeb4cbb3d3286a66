"""What the agents' steps asked of their memories: commands and messages, counted."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, TypeVar

from actormem.actors.memory.commands import Add, ToPool
from actormem.actors.memory.handle import MemoryHandle
from actormem.runtime import Command, Runtime

if TYPE_CHECKING:
    from actormem.actors.app.simulation.brains.llm_client import ModelWait
    from actormem.actors.app.simulation.timeline import Timeline

__all__ = ("CountedMemory", "Tally")

R = TypeVar("R")


class Tally:
    """The run's counts: ``commands`` asked of a memory or the pool, ``messages``
    added, and the seconds the turns took (``turn_seconds``) and spent waiting for
    their memory commands (``memory_seconds``) and pool commands (``pool_seconds``),
    the insights the pool's feeds sent (``fed``) and the seconds the feeds took at
    the ends of the steps (``feed_seconds``); each command is shown to the
    ``timeline`` too, when the run keeps one. ``own_ms_per_model_call`` holds, for
    each turn that called the model, the milliseconds of the turn not spent
    waiting for it, per call."""

    __slots__ = (
        "commands",
        "fed",
        "feed_seconds",
        "memory_seconds",
        "messages",
        "own_ms_per_model_call",
        "pool_seconds",
        "timeline",
        "turn_seconds",
    )

    def __init__(self) -> None:
        self.fed = 0
        self.feed_seconds = 0.0
        self.pool_seconds = 0.0
        self.commands = 0
        self.messages = 0
        self.turn_seconds = 0.0
        self.memory_seconds = 0.0
        self.own_ms_per_model_call: list[float] = []
        self.timeline: Timeline | None = None

    def model_turn(self, took: float, waited: ModelWait) -> None:
        """Note a turn of ``took`` seconds that ``waited`` for the model."""
        if waited.calls:
            own = max(0.0, took - waited.seconds)
            self.own_ms_per_model_call.append(1000 * own / waited.calls)


class CountedMemory(MemoryHandle):
    """A memory handle whose every command counts in a :class:`Tally` (a pool
    command, sent through the agent's memory actor, counts once).

    Args:
        runtime: the runtime hosting (or reaching) the memory actors.
        agent: the agent's name.
        tally: where the counts go.
    """

    __slots__ = ("tally",)

    def __init__(self, runtime: Runtime, agent: str, tally: Tally) -> None:
        super().__init__(runtime, agent)
        self.tally = tally

    async def _checked_ask(self, address: str, command: Command[R]) -> R:
        started = time.perf_counter()
        timeline = self.tally.timeline
        try:
            result = await super()._checked_ask(address, command)
        except Exception as exc:
            if timeline is not None:
                timeline.command(self.agent, command, None, time.perf_counter() - started, exc)
            raise
        finally:
            took = time.perf_counter() - started
            if isinstance(command, ToPool):
                self.tally.pool_seconds += took
            else:
                self.tally.memory_seconds += took
        if timeline is not None:
            timeline.command(self.agent, command, result, time.perf_counter() - started, None)
        self.tally.commands += 1
        if isinstance(command, Add):
            self.tally.messages += len(command.messages)
        return result
