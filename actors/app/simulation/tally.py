"""What the agents' steps asked of their memories: commands and messages, counted."""

from __future__ import annotations

from typing import TypeVar

from actormem.actors.memory.commands import Add, Vouch
from actormem.actors.memory.handle import MemoryHandle
from actormem.runtime import Command, Runtime

__all__ = ("CountedMemory", "Tally")

R = TypeVar("R")


class Tally:
    """The run's counts: ``commands`` asked of a memory or the pool, ``messages`` added."""

    __slots__ = ("commands", "messages")

    def __init__(self) -> None:
        self.commands = 0
        self.messages = 0


class CountedMemory(MemoryHandle):
    """A memory handle whose every command counts in a :class:`Tally`.

    A pool command counts once: the memory actor vouching for it is part of it.

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
        result = await super()._checked_ask(address, command)
        if not isinstance(command, Vouch):
            self.tally.commands += 1
        if isinstance(command, Add):
            self.tally.messages += len(command.messages)
        return result
