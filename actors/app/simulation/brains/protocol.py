"""One agent's step: the protocol every brain implements, and what a step receives.

A *brain* drives one agent. Each step of a run calls ``await brain.step(turn)``
for every agent; when another agent speaks to it, the run calls
``await brain.respond(turn, caller, said)`` for its answer. The :class:`Turn`
holds what a step may use: the agent's name, its memory handle, the step number,
its seeded RNG, the other agents and its relations (the agents the scenario has it
talk to), a way to speak to one of them (an
``agent_call`` answered by an ``agent_response`` in the listener's memory), a way
to share an insight with the pool, and the LLM client when one is configured.

A brain is built once per agent by a *brain factory*, called with that agent's
:class:`AgentInfo`.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, overload

import msgspec

from actormem.actors.app.simulation.town import PlantedFact
from actormem.actors.messages import Message
from actormem.actors.pool.commands import ShareResult
from actormem.runtime.errors import ActormemError

if TYPE_CHECKING:
    from actormem.actors.app.simulation.brains.llm_client import LLMClient
    from actormem.actors.memory.handle import MemoryHandle

__all__ = ("AgentInfo", "Brain", "BrainError", "BrainFactory", "Crowd", "Others", "Turn")


class BrainError(ActormemError):
    """A brain cannot be loaded or built, broke the protocol, or its model failed."""


class Others(Sequence[str]):
    """Every agent's name but one, in the run's order: a view of the run's list of
    names, not a copy (10,000 agents would otherwise hold 10,000 lists of 10,000).

    Args:
        names: the run's agents, in order.
        skip: the position of the one left out.
        positions: each name's position in ``names`` (shared by the views, for
            ``in``).
    """

    __slots__ = ("_names", "_positions", "_skip")

    def __init__(self, names: Sequence[str], skip: int, positions: Mapping[str, int]) -> None:
        self._names = names
        self._skip = skip
        self._positions = positions

    def __len__(self) -> int:
        return len(self._names) - 1

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[str, ...]: ...
    def __getitem__(self, index: int | slice) -> str | tuple[str, ...]:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(len(self))))
        size = len(self)
        if index < 0:
            index += size
        if not 0 <= index < size:
            raise IndexError("agent index out of range")
        return self._names[index + (index >= self._skip)]

    def __iter__(self) -> Iterator[str]:
        for i, name in enumerate(self._names):
            if i != self._skip:
                yield name

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        return self._positions.get(name, self._skip) != self._skip

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"Others({list(self)!r})"


class AgentInfo(msgspec.Struct, frozen=True, kw_only=True):
    """Who one agent is, for its brain factory.

    Attributes:
        name: the agent's name (its memory is ``memory/<name>``).
        persona: what the agent is in the story ("baker").
        index: the agent's place in the run's list of agents.
        seed: the run's seed.
        others: every other agent's name, in the run's order.
        facts: the planted facts the narrator tells this agent.
        relations: the agents this one talks to, in the run's order (the
            scenario's ``[relations]``: every other agent under the ``everyone``
            rule); the scripted brain picks its partners among them. A brain may
            still speak to any agent.
    """

    name: str
    persona: str
    index: int
    seed: int
    others: Sequence[str]
    facts: tuple[PlantedFact, ...] = ()
    relations: Sequence[str] = ()


class Brain(Protocol):
    """What drives one agent."""

    async def step(self, turn: Turn) -> None:
        """Take this agent's step: read memory, think, speak, share, remember."""
        ...

    async def respond(self, turn: Turn, caller: str, said: str) -> str:
        """Answer ``caller``, who said ``said``; the run stores the call and the
        answer in this agent's memory (``agent_call``, ``agent_response``)."""
        ...


#: Builds one agent's brain from its :class:`AgentInfo`.
BrainFactory = Callable[[AgentInfo], Brain]


class Crowd:
    """The run's agents as their turns see them: memories, brains, RNGs.

    Args:
        memories: each agent's memory handle, by name.
        brains: each agent's brain, by name.
        seed: the run's seed; each agent's RNG is seeded with it and its name.
        context_tokens: the budget of a step's ``context()``.
        llm: the model client turns get (None: no LLM configured).
        relations: each agent's relations, by name (an agent not in it: every
            other agent).
        settle: awaited with an agent's name after a turn adds to its memory and
            before :meth:`Turn.context` reads it (a recorded or replayed run waits
            there for the agent's compressions in flight, so that neither its
            context nor its peak size depends on how fast the compressor was);
            None: no wait.
    """

    def __init__(
        self,
        memories: Mapping[str, MemoryHandle],
        brains: Mapping[str, Brain],
        *,
        seed: int,
        context_tokens: int,
        llm: LLMClient | None = None,
        relations: Mapping[str, tuple[str, ...]] | None = None,
        settle: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self.memories = dict(memories)
        self.relations = dict(relations or {})
        self.brains = dict(brains)
        self.names = list(self.memories)
        self.rngs = {n: random.Random(f"{seed}-{n}") for n in self.names}
        positions = {n: i for i, n in enumerate(self.names)}
        self.others = {n: Others(self.names, i, positions) for i, n in enumerate(self.names)}
        self.context_tokens = context_tokens
        self.llm = llm
        self.settle = settle

    def turn(
        self, agent: str, step: int, *, answering: bool = False, rng: random.Random | None = None
    ) -> Turn:
        """``agent``'s turn at ``step`` (``answering``: a turn to answer a call; ``rng``:
        its RNG instead of the agent's own)."""
        return Turn(self, agent, step, answering=answering, rng=rng)


class Turn:
    """What one agent's step receives (see the module docstring).

    Messages given to :meth:`remember` are stored together, in one ``add``, at the
    next :meth:`flush`, :meth:`speak` or the end of the step; the narrator's
    messages of the step (a planted fact) are already waiting there.

    Attributes:
        agent: the agent's name.
        memory: its memory handle.
        step: the step number, from 0.
        rng: the agent's RNG, seeded with the run's seed and its name; the same
            one every step. A turn answering a call has an RNG of that call's
            own, seeded from the caller's RNG, so that what an agent draws does
            not depend on the order in which calls to it and its own step come.
        others: the other agents' names.
        relations: the agents this one talks to (see :attr:`AgentInfo.relations`).
        context_tokens: the budget to ask ``context()`` for.
        llm: the model client (None when no LLM is configured); its requests
            name this agent and step in a recording and in its errors.
    """

    __slots__ = (
        "_answering",
        "_crowd",
        "_pending",
        "agent",
        "context_tokens",
        "llm",
        "memory",
        "others",
        "relations",
        "rng",
        "step",
    )

    def __init__(
        self,
        crowd: Crowd,
        agent: str,
        step: int,
        *,
        answering: bool = False,
        rng: random.Random | None = None,
    ) -> None:
        self._crowd = crowd
        self._answering = answering
        self._pending: list[Message] = []
        self.agent = agent
        self.memory = crowd.memories[agent]
        self.step = step
        self.rng = rng if rng is not None else crowd.rngs[agent]
        self.others = crowd.others[agent]
        self.relations = crowd.relations.get(agent, self.others)
        self.context_tokens = crowd.context_tokens
        self.llm = crowd.llm.for_turn(agent, step) if crowd.llm is not None else None

    def remember(self, *messages: Message) -> None:
        """Queue ``messages`` for this agent's memory (stored at the next flush)."""
        self._pending.extend(messages)

    async def flush(self) -> None:
        """Store the queued messages in this agent's memory, in one ``add``."""
        if self._pending:
            batch, self._pending = self._pending, []
            await self.memory.add(batch)
            await self._settle(self.agent)

    async def context(self) -> list[dict[str, Any]]:
        """This agent's ``context()`` within :attr:`context_tokens`, after a flush
        (in a recorded or replayed run, once its compressions in flight are applied)."""
        await self.flush()
        await self._settle(self.agent)
        return await self.memory.context(self.context_tokens)

    async def speak(self, to: str, text: str, *, record: bool = True) -> str:
        """Say ``text`` to the agent ``to`` and return its answer.

        The listener's brain answers (:meth:`Brain.respond`); its memory gets the
        call as an ``agent_call`` and the answer as an ``agent_response``. With
        ``record``, this agent's memory gets what it said (an ``assistant``
        message, after the queued ones) and the answer (a ``user`` message named
        after the listener) in one add, once the listener has answered; without,
        the caller records the exchange itself (as a tool call and its result,
        say).

        Raises:
            BrainError: ``to`` is no agent of the run, the listener's answer is not
                a string, or this turn is itself answering a call.
        """
        if self._answering:
            raise BrainError(f"{self.agent} is answering a call and cannot speak to {to!r}")
        if to not in self._crowd.memories:
            raise BrainError(f"{self.agent} cannot speak to {to!r}: no agent of that name")
        if record:
            # Kept with the answer, for one add below: the turn reaches this agent's
            # memory as one unit, so a call to it from another agent lands before or
            # after the exchange, never between the line and its answer.
            self.remember(Message(role="assistant", name=self.agent, content=text))
        call_rng = random.Random(self.rng.getrandbits(64))
        listener = self._crowd.turn(to, self.step, answering=True, rng=call_rng)
        answer = await self._crowd.brains[to].respond(listener, self.agent, text)
        if not isinstance(answer, str):
            raise BrainError(
                f"the brain of {to} answered {self.agent} with a {type(answer).__name__}, not a str"
            )
        await listener.memory.add(
            [
                Message(role="agent_call", name=self.agent, content=text),
                Message(role="agent_response", name=to, content=answer),
            ]
        )
        await self._settle(to)
        if record:
            self.remember(Message(role="user", name=to, content=answer))
            await self.flush()
        return answer

    async def _settle(self, agent: str) -> None:
        if self._crowd.settle is not None:
            await self._crowd.settle(agent)

    async def share(self, text: str, topic: str = "town", importance: float = 0.5) -> ShareResult:
        """Share an insight with the pool (delivered to the topic's subscribers)."""
        return await self.memory.share(text, topic, importance)
