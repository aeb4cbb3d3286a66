"""Unsent tells: what a handler sent, kept with its command's commit until written.

A handler's tells and forwards go to the outbox as it sends them, and the outbox
writes them beside the group commit. When a command's commit is stored before the
outbox wrote all of its tells, the commit also stores each tell not yet written
in the shard's *unsent* hash (one Redis Cluster slot with the shard: the same Lua
call that acks the command), keyed by the tell's id. Once the outbox wrote them,
they are deleted from the hash (HDEL). A worker that takes a shard over (or takes
it back after a restart) first sends every tell still in the hash again, in the
order their commands were read from the stream, before it reads the shard: a
worker that died between its commit and its outbox's write loses nothing.

A tell sent again carries its own id (``<command id>.<n>``), so a recipient that
already applied it skips it, as it skips a redelivered command. Nothing waits on
the outbox to store a commit (a full stream makes only the outbox wait), so
commits and writes never wait on each other across workers. A command whose tells
were all written by the time its commit is built stores nothing more.

A tell handed over in memory (``_handover``) is kept the same way: it counts as
written once its recipient's commit stored it, or, sent through the stream after
all, once the outbox wrote it.
"""

from __future__ import annotations

import math
import os
import signal
from typing import TYPE_CHECKING, Final

import anyio
import msgspec
import structlog

from actormem.runtime._envelope import Envelope
from actormem.runtime.redis._client import redis_errors
from actormem.runtime.redis._handover import HandedTell, unsent_order
from actormem.runtime.redis._retry import forever
from actormem.runtime.redis._shards import StreamEnvelope

if TYPE_CHECKING:
    from collections.abc import Callable

    from actormem.runtime.redis._outbox import Outbox, Riders
    from actormem.runtime.redis._shards import Link, Shard

__all__ = ("FAULT_ENV", "Unsent")

log = structlog.get_logger("actormem.redis")

#: Test only: ``N`` makes a worker's outbox stop writing after about N entries, and
#: the worker SIGKILL itself once a commit stored (and acked) a command whose tells
#: that outbox will never write: the fault suite's kill between a commit and the
#: outbox's write. Unset, nothing of it runs.
FAULT_ENV: Final = "ACTORMEM_FAULT_KILL_WITH_UNSENT"
#: Fields deleted per HDEL.
_FORGET_BATCH: Final = 1_000

#: A stored tell: the entry of the command that sent it, its place among that
#: command's sends, its stream, its data, and its deadline (None: none).
_Record = tuple[str, int, str, bytes, float | None]
_record_decoder = msgspec.msgpack.Decoder(_Record)
_encoder = msgspec.msgpack.Encoder()


class Unsent:
    """The tells of handled commands not yet written by the outbox, per shard.

    Args:
        link: the transport.
        outbox: the outbox the handlers' tells go through.
    """

    def __init__(self, link: Link, outbox: Outbox) -> None:
        self._link = link
        self._keys = link.keys
        self._outbox = outbox
        #: Told of each tell sent again (its id and outbox item), if set: see
        #: ``Handover.sent_again``.
        self.sending_again: Callable[[str, tuple[str, bytes, float]], None] | None = None
        #: The tells handed over in memory and not done yet, by id (``Handover.tells``).
        self.handed_tells: dict[str, HandedTell] = {}
        fault = os.environ.get(FAULT_ENV)
        if fault:
            self._arm_fault(int(fault))

    def sent(self, command: Envelope, tell: str, item: tuple[str, bytes, float]) -> None:
        """Note that the handler of ``command`` sent ``tell`` (its id), queued in the
        outbox as ``item`` just now."""
        if isinstance(command, StreamEnvelope):
            record = (tell, item, self._outbox.appended)
            if command.sent is None:
                command.sent = [record]
            else:
                command.sent.append(record)

    def handed(self, command: Envelope, tell: str, handed: HandedTell) -> None:
        """Note that the handler of ``command`` sent ``tell`` (its id), handed over in
        memory as ``handed``."""
        if isinstance(command, StreamEnvelope):
            record = (tell, handed.item, handed)
            if command.sent is None:
                command.sent = [record]
            else:
                command.sent.append(record)

    def waiting(self, command: Envelope) -> bool:
        """True while some tell of ``command`` is not written (or stored) yet."""
        sent = command.sent if isinstance(command, StreamEnvelope) else None
        if not sent:
            return False
        finished = self._outbox.finished
        return any(not _done(where, finished) for _, _, where in sent)

    def unwritten(self, command: Envelope) -> tuple[list[tuple[str, bytes]], int]:
        """The tells of ``command`` not written (or stored) yet, as ``(tell id,
        record)`` for the unsent hash, and the outbox position of the last written
        through the outbox (0: none)."""
        if not isinstance(command, StreamEnvelope) or not command.sent:
            return [], 0
        finished = self._outbox.finished
        tells: list[tuple[str, bytes]] = []
        last = 0
        entry, first = unsent_order(command)
        for n, (tell, (stream, data, deadline), where) in enumerate(command.sent, first):
            if not _done(where, finished):
                expires = None if deadline == math.inf else deadline
                tells.append((tell, _encoder.encode((entry, n, stream, data, expires))))
                last = max(last, where if isinstance(where, int) else where.position)
        return tells, last

    def failed(self, command: Envelope) -> None:
        """The handler of ``command`` failed: its next attempt sends its tells again."""
        if isinstance(command, StreamEnvelope):
            command.sent = None

    def stored(self, shard: Shard, fields: list[str], position: int) -> None:
        """A commit stored ``fields`` in the unsent hash: delete them once the outbox
        wrote through ``position`` and those handed over in memory are done."""
        handed = self.handed_tells
        waits = [h for f in fields if (h := handed.get(f)) is not None] if handed else []
        shard.unsent.append((position, fields, waits))
        shard.unsent_ready.set()

    async def run(self, shard: Shard) -> None:
        """Delete the shard's stored tells as the outbox writes them, while it is owned."""
        outbox = self._outbox
        while True:
            await shard.unsent_ready.wait()
            shard.unsent_ready = anyio.Event()
            while shard.unsent:
                position, _, handed = shard.unsent[0]
                await outbox.written(position)
                for tell in handed:
                    await tell.wait(outbox)
                await forever("forget_unsent", lambda: self.forget_written(shard))

    async def forget_written(self, shard: Shard) -> None:
        """Delete the stored tells the outbox has written (HDEL, in batches).

        Raises:
            TransportError: Redis is away or failed (they stay listed, for a retry).
        """
        finished = self._outbox.finished
        taken: list[tuple[int, list[str], list[HandedTell]]] = []
        while shard.unsent and _kept_done(shard.unsent[0], finished):
            taken.append(shard.unsent.popleft())
        if not taken:
            return
        key = self._keys.unsent(shard.number)
        fields = [name for _, names, _ in taken for name in names]
        try:
            with redis_errors(f"HDEL {key}"):
                async with self._link.client.pipeline(transaction=False) as pipe:
                    for i in range(0, len(fields), _FORGET_BATCH):
                        pipe.hdel(key, *fields[i : i + _FORGET_BATCH])
                    await pipe.execute()
        except BaseException:
            shard.unsent.extendleft(reversed(taken))
            raise

    async def resend(self, shard: Shard) -> None:
        """Send again every tell the shard's earlier owners stored and may not have
        written, in the order their commands were read, before the shard is read.

        Queued past the outbox's bound (there are at most as many as an outbox
        holds), so that taking a shard over never waits for room in a stream.

        Raises:
            TransportError: Redis is away or failed.
        """
        key = self._keys.unsent(shard.number)
        with redis_errors(f"HGETALL {key}"):
            stored: dict[bytes, bytes] = await self._link.client.hgetall(key)  # type: ignore[assignment]
        if not stored:
            return
        tells: list[tuple[tuple[int, int, int], str, tuple[str, bytes, float]]] = []
        broken: list[bytes] = []
        for field, value in stored.items():
            try:
                name = field.decode()
                entry, n, stream, data, deadline = _record_decoder.decode(value)
                ms, _, seq = entry.partition("-")
                order = (int(ms), int(seq), n)
            except (msgspec.DecodeError, ValueError):  # UnicodeDecodeError is one
                broken.append(field)
                continue
            item = (stream, data, math.inf if deadline is None else deadline)
            tells.append((order, name, item))
        if broken:
            log.error("unsent_tells_unreadable", shard=shard.number, tells=len(broken))
            with redis_errors(f"HDEL {key}"):
                await self._link.client.hdel(key, *broken)
        if not tells:
            return
        tells.sort(key=lambda t: t[0])
        outbox = self._outbox
        for _, name, item in tells:
            if self.sending_again is not None:
                self.sending_again(name, item)
            outbox.put_nowait(item)
        self.stored(shard, [name for _, name, _ in tells], outbox.appended)
        log.info("unsent_tells_sent_again", shard=shard.number, tells=len(tells))

    def _arm_fault(self, after: int) -> None:
        """Test only (see :data:`FAULT_ENV`): the outbox stops writing before the batch
        that would take it past ``after`` entries (the first batch always goes), and
        the worker SIGKILLs itself once a commit stored a tell it will not write."""
        outbox = self._outbox
        write = outbox._write
        # Entries written when the outbox stopped (-1: still writing), and the
        # outbox position of the last tell a commit stored.
        state = {"written": -1, "stored": 0}

        def die_if_kept_unwritten() -> None:
            if 0 <= state["written"] < state["stored"]:
                log.warning("fault_kill_with_unsent", written=state["written"])
                os.kill(os.getpid(), signal.SIGKILL)

        async def write_then_stop(batch: list[tuple[str, bytes]], riders: Riders | None) -> None:
            finished = outbox.finished
            if state["written"] < 0 and finished and finished + len(batch) > after:
                state["written"] = finished
                die_if_kept_unwritten()
            if state["written"] >= 0:
                await anyio.sleep_forever()
            await write(batch, riders)

        stored = self.stored

        def stored_then_die(shard: Shard, fields: list[str], position: int) -> None:
            stored(shard, fields, position)
            state["stored"] = max(state["stored"], position)
            die_if_kept_unwritten()

        outbox._write = write_then_stop  # type: ignore[method-assign]
        self.stored = stored_then_die  # type: ignore[method-assign]


def _done(where: int | HandedTell, finished: int) -> bool:
    """Whether a tell sent is written: through the outbox at position ``where``, or
    handed over in memory as ``where`` (see :meth:`HandedTell.done`)."""
    return where <= finished if isinstance(where, int) else where.done(finished)


def _kept_done(kept: tuple[int, list[str], list[HandedTell]], finished: int) -> bool:
    """Whether the tells a commit stored (``kept``, see :meth:`Unsent.stored`) are all
    written, or stored by their recipients."""
    position, _, handed = kept
    return position <= finished and all(tell.done(finished) for tell in handed)
