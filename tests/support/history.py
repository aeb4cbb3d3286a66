"""The history checker: what was sent against what every agent ended with.

A fault test records each command it sends (:meth:`History.sent`): its id, the
agent it is for, a hash of its payload, the producer that sent it and, implicitly,
the send order. After the run it reads back the state every agent ended with (a
list of :class:`Applied` per agent, oldest first: an agent memory's original
history, or a durable actor's log read straight from Redis) and :func:`check`
compares the two:

* **lost**: sent, and applied nowhere;
* **duplicated**: applied more than once (on one agent, or on several);
* **reordered**: applied in another order than one producer sent them to one
  agent (commands from different producers have no order between them);
* **misrouted**: applied on an agent it was not sent to;
* **corrupted**: applied with another payload than the one sent;
* **unknown**: applied, but never sent (a stale write, or a forged command).

Each kind comes with its count and a few examples, so a failing assertion says
what went wrong, not only that something did.
"""

from __future__ import annotations

import hashlib
import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import redis.asyncio as aioredis

from actormem.actors.memory.snapshot import is_logged_delivery
from actormem.actors.messages import Message, decode_message
from actormem.runtime.redis import Keys, shard_of

__all__ = (
    "Applied",
    "History",
    "Sent",
    "Verdict",
    "check",
    "digest",
    "message_digest",
    "observe_memory",
    "observe_stored_memory",
)

#: Examples kept per kind of fault.
EXAMPLES = 5


def digest(payload: bytes | str | Any) -> str:
    """A short hash of a payload: bytes as they are, text as UTF-8, else its msgpack."""
    if isinstance(payload, str):
        payload = payload.encode()
    elif not isinstance(payload, bytes):
        payload = msgspec.msgpack.encode(payload)
    return hashlib.blake2b(payload, digest_size=8).hexdigest()


def message_digest(message: Message) -> str:
    """The payload hash of a stored message: its role, speaker and content.

    The id is the command id, and the timestamp and token count are set on the
    way, so neither is part of the payload.
    """
    return digest([message.role, message.name, message.content])


@dataclass(frozen=True)
class Sent:
    """One command a test sent.

    Attributes:
        command: its id, unique in the run (for an agent memory: the message id).
        agent: the agent it is for.
        digest: the hash of its payload (see :func:`digest`).
        seq: its place in the send order of the whole run.
        producer: who sent it; order is checked among one producer's commands.
    """

    command: str
    agent: str
    digest: str
    seq: int
    producer: str = "main"


@dataclass(frozen=True)
class Applied:
    """One command found in an agent's final state.

    Attributes:
        command: the command id found.
        digest: the hash of the payload found (None: the state does not hold
            the payload, only the id, and it is not compared).
    """

    command: str
    digest: str | None = None


@dataclass(frozen=True)
class Verdict:
    """What :func:`check` found: counts, and up to ``EXAMPLES`` examples of each."""

    sent: int
    applied: int
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    misrouted: int = 0
    corrupted: int = 0
    unknown: int = 0
    examples: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when nothing was lost, duplicated, reordered, misrouted, corrupted or made up."""
        return not (
            self.lost
            or self.duplicated
            or self.reordered
            or self.misrouted
            or self.corrupted
            or self.unknown
        )

    def __str__(self) -> str:
        counts = ", ".join(
            f"{kind} {getattr(self, kind)}"
            for kind in ("lost", "duplicated", "reordered", "misrouted", "corrupted", "unknown")
        )
        lines = [f"{self.sent} sent, {self.applied} applied: {counts}"]
        for kind, examples in self.examples.items():
            lines.extend(f"  {kind}: {example}" for example in examples)
        return "\n".join(lines)


class History:
    """The commands a test sent, in send order (see the module docstring)."""

    def __init__(self) -> None:
        self._sent: dict[str, Sent] = {}
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._sent)

    def sent(self, command: str, agent: str, payload: Any, *, producer: str = "main") -> Sent:
        """Record a command as sent (call it just before sending).

        Raises:
            ValueError: the command id was recorded already (ids must be unique).
        """
        return self._record(command, agent, digest(payload), producer)

    def message(self, agent: str, message: Message, *, producer: str = "main") -> Message:
        """Record a message added to ``agent``'s memory (its id is the command id)."""
        self._record(message.id, agent, message_digest(message), producer)
        return message

    def _record(self, command: str, agent: str, hashed: str, producer: str) -> Sent:
        if command in self._sent:
            raise ValueError(f"command id {command!r} recorded twice")
        record = Sent(command, agent, hashed, next(self._seq), producer)
        self._sent[command] = record
        return record

    def forget(self, command: str) -> None:
        """Drop a command whose sending failed for sure (it must not be counted lost)."""
        del self._sent[command]

    def agents(self) -> list[str]:
        """Every agent a command was sent to, in order of first use."""
        return list(dict.fromkeys(s.agent for s in self._sent.values()))

    def records(self) -> list[Sent]:
        """The sent commands, in send order."""
        return list(self._sent.values())

    def check(self, final: Mapping[str, Sequence[Applied]]) -> Verdict:
        """:func:`check` this history against ``final``."""
        return check(self.records(), final)


def check(sent: Iterable[Sent], final: Mapping[str, Sequence[Applied]]) -> Verdict:
    """Compare the commands sent with the state every agent ended with.

    Args:
        sent: the commands sent.
        final: for each agent, the commands its state holds, oldest first.
            Agents absent from ``final`` are taken as empty.
    """
    by_id = {s.command: s for s in sent}
    examples: dict[str, list[str]] = defaultdict(list)

    def note(kind: str, text: str) -> None:
        if len(examples[kind]) < EXAMPLES:
            examples[kind].append(text)

    seen: dict[str, list[str]] = defaultdict(list)  # command -> agents it was applied on
    applied = 0
    misrouted = corrupted = unknown = reordered = 0
    for agent, entries in final.items():
        # Per producer: the highest send position applied so far on this agent.
        high: dict[str, Sent] = {}
        for entry in entries:
            applied += 1
            first_here = agent not in seen[entry.command]
            seen[entry.command].append(agent)
            record = by_id.get(entry.command)
            if record is None:
                unknown += 1
                note("unknown", f"{entry.command} on {agent}")
                continue
            if record.agent != agent:
                misrouted += 1
                note("misrouted", f"{entry.command} sent to {record.agent}, applied on {agent}")
                continue
            if entry.digest is not None and entry.digest != record.digest:
                corrupted += 1
                note("corrupted", f"{entry.command} on {agent}: payload changed")
            if not first_here:
                continue  # a duplicate: counted below, not an order violation
            last = high.get(record.producer)
            if last is not None and record.seq < last.seq:
                reordered += 1
                note("reordered", f"{entry.command} applied after {last.command} on {agent}")
            else:
                high[record.producer] = record
    lost = [s for s in by_id.values() if s.command not in seen]
    for record in lost[:EXAMPLES]:
        note("lost", f"{record.command} for {record.agent}")
    duplicated = 0
    for command, agents in seen.items():
        if len(agents) > 1:
            duplicated += 1
            note("duplicated", f"{command} applied {len(agents)} times (on {', '.join(agents)})")
    return Verdict(
        sent=len(by_id),
        applied=applied,
        lost=len(lost),
        duplicated=duplicated,
        reordered=reordered,
        misrouted=misrouted,
        corrupted=corrupted,
        unknown=unknown,
        examples={kind: tuple(texts) for kind, texts in examples.items()},
    )


def _applied(messages: Iterable[Message]) -> list[Applied]:
    return [Applied(m.id, message_digest(m)) for m in messages]


async def observe_memory(rt: Any, agents: Iterable[str]) -> dict[str, list[Applied]]:
    """Every agent's original history through the public API (``get(scope="history")``).

    Args:
        rt: a :class:`~actors.MemoryRuntime` (or any runtime with ``memory()``).
        agents: the agents to read.
    """
    return {agent: _applied(await rt.memory(agent).get(scope="history")) for agent in agents}


async def observe_stored_memory(
    client: aioredis.Redis, prefix: str, shards: int, agents: Iterable[str]
) -> dict[str, list[Applied]]:
    """Every agent's original history as stored in Redis (its durable log, the insight
    deliveries it also holds left out), read directly.

    Reads what survives a worker's death, without asking any worker.
    """
    keys = Keys(prefix)
    final = {}
    for agent in agents:
        address = f"memory/{agent}"
        entries = await client.lrange(keys.actor_log(shard_of(address, shards), address), 0, -1)
        final[agent] = _applied(
            decode_message(entry) for entry in entries if not is_logged_delivery(entry)
        )
    return final
