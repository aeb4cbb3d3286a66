"""The part of a memory handle every other part builds on: the agent, its
addresses, and asking its memory actor (or the pool) a checked command.
"""

from __future__ import annotations

import math
from collections.abc import Coroutine
from typing import Any, TypeVar

import msgspec

from actormem.actors.errors import MemoryInputError
from actormem.actors.memory.commands import (
    ToPool,
)
from actormem.actors.memory.inputs import check_command, shown
from actormem.actors.pool.commands import (
    POOL_ADDRESS,
    AgentCommand,
)
from actormem.runtime import Command, MessageTooLargeError, Runtime

__all__ = ("HandleBase",)


R = TypeVar("R")


class HandleBase:
    """What every part of a :class:`~actormem.actors.memory.handle.MemoryHandle` uses:
    the agent, its addresses, and how a command is checked and asked.

    Args:
        runtime: the runtime hosting (or reaching) the memory actors.
        agent: the agent's name.
        timeout: seconds each call waits for the actor (the runtime's default).
    """

    __slots__ = ("address", "agent", "pool", "runtime", "timeout")

    def __init__(self, runtime: Runtime, agent: str, timeout: float | None = None) -> None:
        if not isinstance(agent, str) or not agent.strip():
            raise MemoryInputError("an agent name is a non-empty string")
        if len(agent) > 256 or any(ord(c) < 32 for c in agent):
            raise MemoryInputError(
                f"invalid agent name {agent[:40]!r}: at most 256 printable characters"
            )
        if timeout is not None and (
            not isinstance(timeout, int | float)
            or isinstance(timeout, bool)
            or not 0 < timeout < math.inf
        ):
            raise MemoryInputError(
                f"timeout must be a positive number of seconds or None, got {shown(timeout)}"
            )
        self.runtime = runtime
        self.agent = agent
        self.address = f"memory/{agent}"
        self.timeout = timeout
        #: The insight pool this agent shares with.
        self.pool = POOL_ADDRESS

    def __repr__(self) -> str:
        return f"MemoryHandle({self.agent!r})"

    # _ask and _ask_pool hand back _checked_ask's coroutine for the caller to await:
    # one coroutine less on every handle call.

    def _ask(self, command: Command[R]) -> Coroutine[Any, Any, R]:
        return self._checked_ask(self.address, command)

    def _ask_pool(self, command: Command[R]) -> Coroutine[Any, Any, R]:
        return self._checked_ask(self.pool, command)

    async def _checked_ask(self, address: str, command: Command[R]) -> R:
        check_command(command)
        try:
            return await self.runtime.ask(address, command, self.timeout)
        except MessageTooLargeError as e:
            # Valid for the memory, but too big for the transport to carry: still the
            # caller's input, refused before anything was sent.
            raise MemoryInputError(f"{e}; send less per call") from e

    async def _as_agent(self, command: Command[R]) -> R:
        """Send ``command`` (one that acts for this agent) to the pool through this
        agent's memory actor, and return the pool's answer.

        The pool takes a command that acts for an agent only from that agent's
        memory actor (the envelope's sender), so nobody can share as, subscribe,
        or forget another agent.
        """
        check_command(command)
        assert isinstance(command, AgentCommand)
        value = await self._ask(ToPool(command=command))
        reply_type = type(command).reply_type
        # Over Redis the answer of a ToPool arrives as plain values.
        if isinstance(reply_type, type) and not isinstance(value, reply_type):
            return msgspec.convert(value, reply_type)
        return value  # type: ignore[no-any-return]
