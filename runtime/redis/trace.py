"""The stage tracer: when each ask passed each stage of its way over Redis.

Opt-in, for finding where an ask's time goes (``actormem bench redis_latency
--trace``). A transport traces only with a :class:`Tracer` attached (see
:func:`attach`); without one, each stage's hook is one check of an attribute that
is None. A process started with :data:`TRACE_ENV` naming a directory attaches a
tracer to each Redis transport it makes, and writes each tracer's records there
when it exits (``trace-<pid>-<n>.msgpack``): that is how worker processes hand
theirs over.

An ask's stages, each a wall-clock time (comparable across the processes of one
host), keyed by its command id:

- ``sent``, ``written``: the asker queued it in its outbox; the outbox sent the
  XADD that carries it (when that call returns tells more of the writer's event
  loop than of Redis);
- ``read``: a worker's shard read returned it;
- ``started``, ``handled``: its handler started; returned;
- ``committing``, ``committed``: the group commit call storing its changes (and
  writing its reply) was sent; the worker heard that it returned;
- ``reply_queued``, ``reply_written``: a reply that waits for no commit was queued
  in the worker's reply outbox; the outbox sent the XADD that carries it;
- ``answered``: the asker read the reply.

:func:`timelines` merges the records of every process, :func:`spans` turns them
into the time between consecutive stages. A tracer also records how late its
event loop runs (:meth:`Tracer.watch_loop`, which the transport runs while it is
open), and how many commands each shard read and commit call carried.
"""

from __future__ import annotations

import atexit
import itertools
import math
import os
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from enum import IntEnum
from functools import partial
from pathlib import Path
from time import time
from typing import TYPE_CHECKING, Any, Final

import anyio
import msgspec

from actormem.runtime._envelope import Envelope

if TYPE_CHECKING:
    from actormem.runtime.redis._shards import PendingCommit
    from actormem.runtime.redis.transport import RedisTransport

__all__ = (
    "SPANS",
    "TRACE_ENV",
    "Stage",
    "Tracer",
    "attach",
    "call_sizes",
    "from_env",
    "load",
    "loop_lags",
    "spans",
    "timelines",
)

#: The environment variable naming the directory a process's tracers are written to.
TRACE_ENV: Final = "ACTORMEM_TRACE"

#: How often :meth:`Tracer.watch_loop` looks how late the event loop is (s).
_LOOP_PERIOD: Final = 0.005

_numbers = itertools.count()


class Stage(IntEnum):
    """A point on an ask's way (see the module docstring)."""

    SENT = 0
    WRITTEN = 1
    READ = 2
    STARTED = 3
    HANDLED = 4
    COMMITTING = 5
    COMMITTED = 6
    REPLY_QUEUED = 7
    REPLY_WRITTEN = 8
    ANSWERED = 9


#: The spans :func:`spans` measures: a name, the stages it runs from (the first one
#: an ask passed), and the stage it runs to.
SPANS: Final[tuple[tuple[str, tuple[Stage, ...], Stage], ...]] = (
    ("client outbox", (Stage.SENT,), Stage.WRITTEN),
    ("to the worker's read", (Stage.WRITTEN,), Stage.READ),
    ("mailbox", (Stage.READ,), Stage.STARTED),
    ("handler", (Stage.STARTED,), Stage.HANDLED),
    ("waiting for the commit call", (Stage.HANDLED,), Stage.COMMITTING),
    ("commit call", (Stage.COMMITTING,), Stage.COMMITTED),
    ("reply queued", (Stage.HANDLED,), Stage.REPLY_QUEUED),
    ("worker reply outbox", (Stage.REPLY_QUEUED,), Stage.REPLY_WRITTEN),
    # From when the commit call that writes the reply left: the worker hears that it
    # returned (``committed``) when its event loop gets to it, often after the asker.
    ("reply to the asker", (Stage.REPLY_WRITTEN, Stage.COMMITTING), Stage.ANSWERED),
    ("whole ask", (Stage.SENT,), Stage.ANSWERED),
)


class Records(msgspec.Struct, array_like=True):
    """What one tracer recorded, as written to a file: ``ids[n]`` passed
    ``stages[n]`` at ``times[n]``; how late its event loop ran (see
    :meth:`Tracer.watch_loop`); and the shard reads and commit calls it made."""

    ids: list[str]
    stages: bytes
    times: list[float]
    #: (when, how late the event loop ran a timer due then, in s).
    lags: list[tuple[float, float]] = []
    #: (``READ`` or ``COMMITTING``, when, the commands the read or call carried).
    calls: list[tuple[int, float, int]] = []


class Tracer:
    """Records the stages of the asks one transport sends or handles.

    Compact (an id reference, a byte and a float per stage), for runs of a few
    hundred thousand asks. An outbox's ``written`` stage is resolved from the
    outbox's positions: an entry is written by the first batch sent through its
    position (see ``Outbox.appended``).
    """

    __slots__ = ("_asks", "_calls", "_ids", "_lags", "_queued", "_stages", "_times", "_written")

    def __init__(self) -> None:
        self._ids: list[str] = []
        self._stages = bytearray()
        self._times = array("d")
        # The asks sent here by correlation: their replies name only that.
        self._asks: dict[int, str] = {}
        # (stage, command id, outbox position) and (stage, finished through, time).
        self._queued: list[tuple[int, str, int]] = []
        self._written: list[tuple[int, int, float]] = []
        self._lags: list[tuple[float, float]] = []
        self._calls: list[tuple[int, float, int]] = []

    def __len__(self) -> int:
        return len(self._ids)

    def mark(self, command: str, stage: Stage) -> None:
        """``command`` passed ``stage`` now."""
        self._ids.append(command)
        self._stages.append(stage)
        self._times.append(time())

    def sent(self, envelope: Envelope, position: int) -> None:
        """The asker queued ``envelope`` at ``position`` of its outbox."""
        self.mark(envelope.id, Stage.SENT)
        if envelope.correlation is not None:
            self._asks[envelope.correlation] = envelope.id
        self._queued.append((Stage.WRITTEN, envelope.id, position))

    def read(self, batch: Iterable[tuple[str, Any, Any]]) -> None:
        """A shard read returned ``batch`` (entry, data, envelope or error)."""
        now = time()
        read = 0
        for _, _, env in batch:
            if isinstance(env, Envelope) and env.id:
                self._ids.append(env.id)
                self._stages.append(Stage.READ)
                self._times.append(now)
                read += 1
        self._calls.append((Stage.READ, now, read))

    def started(self, envelope: Envelope) -> None:
        """A dispatcher starts ``envelope``'s handler."""
        self.mark(envelope.id, Stage.STARTED)

    def handled(self, envelope: Envelope) -> None:
        """``envelope``'s handler returned."""
        self.mark(envelope.id, Stage.HANDLED)

    def commit(self, batch: Sequence[PendingCommit], stage: Stage) -> None:
        """The commit call storing ``batch`` passed ``stage`` (committing, committed)."""
        now = time()
        for pending in batch:
            for env in pending.envelopes:
                self._ids.append(env.id)
                self._stages.append(stage)
                self._times.append(now)
        if stage == Stage.COMMITTING:
            self._calls.append((stage, now, sum(len(p.envelopes) for p in batch)))

    def reply_queued(self, envelope: Envelope, position: int) -> None:
        """The reply to ``envelope`` was queued at ``position`` of the reply outbox."""
        self.mark(envelope.id, Stage.REPLY_QUEUED)
        self._queued.append((Stage.REPLY_WRITTEN, envelope.id, position))

    def writing(self, stage: Stage, through: int) -> None:
        """An outbox sends its entries up to position ``through`` (or drops those
        expired) now."""
        self._written.append((stage, through, time()))

    def answered(self, correlation: int) -> None:
        """The asker read the reply to its ask ``correlation``."""
        command = self._asks.pop(correlation, None)
        if command is not None:
            self.mark(command, Stage.ANSWERED)

    async def watch_loop(self) -> None:
        """Record, until cancelled, how late the event loop runs a timer (every
        :data:`_LOOP_PERIOD` s): the time every task of the process waits for a turn."""
        while True:
            due = time() + _LOOP_PERIOD
            await anyio.sleep(_LOOP_PERIOD)
            now = time()
            self._lags.append((now, max(0.0, now - due)))

    def records(self) -> Records:
        """Everything recorded so far, the outboxes' stages resolved."""
        ids, stages, times = list(self._ids), bytearray(self._stages), list(self._times)
        for stage in (Stage.WRITTEN, Stage.REPLY_WRITTEN):
            writes = sorted((through, at) for s, through, at in self._written if s == stage)
            finished = [through for through, _ in writes]
            for s, command, position in self._queued:
                n = bisect_left(finished, position) if s == stage else len(writes)
                if n < len(writes):
                    ids.append(command)
                    stages.append(stage)
                    times.append(writes[n][1])
        return Records(ids, bytes(stages), times, list(self._lags), list(self._calls))

    def dump(self, path: Path) -> None:
        """Write :meth:`records` to ``path`` (msgpack)."""
        path.write_bytes(msgspec.msgpack.encode(self.records()))


def load(path: Path) -> Records:
    """The records :meth:`Tracer.dump` wrote to ``path``."""
    return msgspec.msgpack.decode(path.read_bytes(), type=Records)


def from_env() -> Tracer | None:
    """A tracer written to the directory :data:`TRACE_ENV` names when this process
    exits; None (no tracing) when it is not set."""
    directory = os.environ.get(TRACE_ENV)
    if not directory:
        return None
    tracer = Tracer()
    path = Path(directory) / f"trace-{os.getpid()}-{next(_numbers)}.msgpack"
    atexit.register(tracer.dump, path)
    return tracer


def attach(transport: RedisTransport, tracer: Tracer | None) -> None:
    """Have ``transport`` record its asks' stages to ``tracer`` (None: stop tracing).
    Before the transport opens: its dispatchers take the tracer when they start."""
    transport.trace = tracer
    outboxes = (transport._outbox, Stage.WRITTEN), (transport._replies.outbox, Stage.REPLY_WRITTEN)
    for outbox, stage in outboxes:
        outbox.on_writing = None if tracer is None else partial(tracer.writing, stage)


def timelines(records: Iterable[Records]) -> dict[str, list[float]]:
    """Each ask's stages from the records of every process, by command id: the time
    it first passed each stage (by :class:`Stage`), NaN for the stages it did not.
    Only asks sent by a traced asker are kept."""
    found: dict[str, list[float]] = {}
    every = list(records)
    for part in every:
        for command, stage in zip(part.ids, part.stages, strict=True):
            if stage == Stage.SENT and command not in found:
                found[command] = [math.nan] * len(Stage)
    for part in every:
        for command, stage, at in zip(part.ids, part.stages, part.times, strict=True):
            line = found.get(command)
            if line is not None and not line[stage] <= at:  # the first time (NaN: none yet)
                line[stage] = at
    return found


def spans(lines: Iterable[Sequence[float]]) -> dict[str, list[float]]:
    """The time (s) each ask of ``lines`` (see :func:`timelines`) spent in each of
    :data:`SPANS`, for the asks that passed both of its ends."""
    out: dict[str, list[float]] = {name: [] for name, _, _ in SPANS}
    for line in lines:
        for name, starts, end in SPANS:
            until = line[end]
            if math.isnan(until):
                continue
            since = next((line[s] for s in starts if not math.isnan(line[s])), math.nan)
            if not math.isnan(since):
                out[name].append(until - since)
    return out


def loop_lags(records: Iterable[Records], began: float, ended: float) -> list[float]:
    """How late the event loops of ``records`` ran their timers between ``began`` and
    ``ended`` (s)."""
    return [lag for part in records for at, lag in part.lags if began <= at <= ended]


def call_sizes(records: Iterable[Records], stage: Stage, began: float, ended: float) -> list[int]:
    """The commands each shard read (``READ``) or commit call (``COMMITTING``) of
    ``records`` carried between ``began`` and ``ended``."""
    return [n for part in records for s, at, n in part.calls if s == stage and began <= at <= ended]
