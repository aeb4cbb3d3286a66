"""Mailboxes: every address's cell, the ready queue, and waking the dispatchers.

Every address that has received a message has a *cell* (the actor object, a
mailbox created only while it holds mail, a ``scheduled`` flag). A cell with mail
sits once in the ready queue, where a dispatcher (``_dispatch``) takes it to run
its messages; while none is awake, a new ready cell wakes one. Mailboxes are
bounded: a sender waits for room, or is refused at once (``deliver_nowait``).

A dispatcher never waits for room. Were it to, actors that send to each other
could hold every dispatcher while the mailboxes they wait on need one to drain:
a stall. So a message an actor's handler sends to a full mailbox is taken past
the bound, and the sender is *muted*: it takes no further turn until the full
mailbox has room again (Pony's backpressure). A sender whose own mailbox is full
is never muted, so the muted always wait on a cell that runs: no cycle of
mailboxes can stall. The bound holds for senders outside the actors (the
application's tells and asks), which wait; inside, a mailbox exceeds it by at
most what its senders' current turns send.

A message that cannot reach an actor for a reason of its own (an address that is
not ``kind/key``, a kind not registered, an actor stopped and in its back-off) is
refused here, before it is queued (see :meth:`Mailboxes.cell`).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import anyio
import structlog

from actormem.runtime._cell import Cell, Kind
from actormem.runtime._envelope import Envelope
from actormem.runtime._supervision import Stopped, call_stop_hook
from actormem.runtime.errors import ActorNotFoundError, MailboxFullError, RuntimeClosedError
from actormem.runtime.ids import split_address

if TYPE_CHECKING:
    from actormem.runtime._asks import Asks

__all__ = ("SPARE_MAILBOXES", "Census", "Mailboxes")

log = structlog.get_logger("actormem.runtime")

#: Emptied mailboxes kept for the next cells that get mail (a deque is ~600 bytes,
#: allocated from the C heap: at 1,000 agents most turns empty one).
SPARE_MAILBOXES: Final = 64


class Census(NamedTuple):
    """What one walk over the cells counts (for :meth:`Runtime.stats` and the metrics)."""

    active: int
    stopped: int
    mailbox_depth: int
    max_mailbox_depth: int
    #: Actors in memory, by kind.
    active_by_kind: dict[str, int]


class Mailboxes:
    """The cells of one runtime, the ready queue, and the dispatchers waiting for it.

    Args:
        kinds: the runtime's registered kinds, by name.
        asks: where replies go (the asks of mail nobody will handle fail there).

    Attributes:
        cells: every address that has received a message, activated or stopped.
        ready: cells with mail, waiting for a dispatcher.
        stopped: the actors stopped by supervision, by address, while in back-off
            (their cells are dropped).
        passivated: idle actors dropped from memory, by kind.
    """

    __slots__ = (
        "_asks",
        "_idle",
        "_kinds",
        "_running",
        "_spare",
        "_waking",
        "cells",
        "passivated",
        "ready",
        "stopped",
    )

    def __init__(self, kinds: dict[str, Kind], asks: Asks) -> None:
        self._kinds = kinds
        self._asks = asks
        self.cells: dict[str, Cell] = {}
        self.ready: deque[Cell] = deque()
        # Dispatchers waiting for a cell with mail; a new ready cell wakes one when
        # none is on its way (see _wake).
        self._idle: deque[asyncio.Future[None]] = deque()
        # Dispatchers woken that have not taken a cell yet.
        self._waking = 0
        self._spare: list[deque[Envelope]] = []
        # The cell each dispatcher task runs now (see deliver).
        self._running: dict[asyncio.Task[Any], Cell | None] = {}
        self.stopped: dict[str, Stopped] = {}
        self.passivated: dict[str, int] = {}

    def cell(self, address: str) -> Cell:
        """The cell of ``address``, made on its first message (or the first after a
        stopped actor's back-off).

        Raises:
            InvalidAddressError: the address is not ``kind/key``.
            ActorNotFoundError: no kind of that name is registered.
            ActorStoppedError: the actor stopped and its back-off is not over.
        """
        cell = self.cells.get(address)
        if cell is None:
            kind_name, _ = split_address(address)
            kind = self._kinds.get(kind_name)
            if kind is None:
                raise ActorNotFoundError(address, f"no actor kind {kind_name!r} is registered")
            stopped = self.stopped.get(address)
            if stopped is not None:
                if stopped.left() > 0:
                    raise stopped.refusal(address)
                del self.stopped[address]
                log.info("actor_back_after_stop", actor=address, reason=stopped.reason)
            cell = self.cells[address] = Cell(address, kind)
        return cell

    def stop_reason(self, address: str) -> str | None:
        """Why the actor at ``address`` stopped, while its back-off lasts."""
        stopped = self.stopped.get(address)
        return stopped.reason if stopped is not None and stopped.left() > 0 else None

    def deliver_nowait(self, envelope: Envelope) -> None:
        """Put ``envelope`` into its mailbox, or raise :class:`MailboxFullError`
        (or the :class:`ActorError` that refuses it: see :meth:`cell`)."""
        cell = self.cells.get(envelope.recipient) or self.cell(envelope.recipient)
        mailbox = cell.mailbox
        if mailbox is None:
            spare = self._spare
            mailbox = cell.mailbox = spare.pop() if spare else deque()
        elif len(mailbox) >= cell.kind.mailbox_size:
            raise MailboxFullError(
                cell.address, f"mailbox full ({cell.kind.mailbox_size} messages waiting)"
            )
        mailbox.append(envelope)
        if not cell.scheduled:
            cell.scheduled = True
            self.ready.append(cell)
            if self._idle and not self._waking:  # else one is awake or on its way
                self._wake()

    async def deliver(self, envelope: Envelope) -> None:
        """Put ``envelope`` into its mailbox, waiting while the mailbox is full; from a
        dispatcher (an actor's handler), take it past the bound and mute the sender
        instead (see the module doc)."""
        while True:
            cell = self.cells.get(envelope.recipient) or self.cell(envelope.recipient)
            mailbox = cell.mailbox
            if mailbox is None or len(mailbox) < cell.kind.mailbox_size:
                self.deliver_nowait(envelope)
                return
            sender = self._running.get(asyncio.current_task())  # type: ignore[arg-type]
            if sender is not None:
                mailbox.append(envelope)
                if not cell.scheduled:
                    cell.scheduled = True
                    self.ready.append(cell)
                    if self._idle and not self._waking:
                        self._wake()
                self._mute(sender, cell)
                return
            if cell.space is None:
                cell.space = anyio.Event()
            await cell.space.wait()

    def _mute(self, sender: Cell, full: Cell) -> None:
        """Hold ``sender`` back until ``full`` has room, unless it is ``full`` itself or
        its own mailbox is full (a muted cell must never be what others wait on)."""
        own = sender.mailbox
        if sender is full or (own is not None and len(own) >= sender.kind.mailbox_size):
            return
        sender.muted = full
        if full.muting is None:
            full.muting = [sender]
        else:
            full.muting.append(sender)

    def release(self, cell: Cell) -> None:
        """``cell`` has room (or is gone): let the cells muted on it run again."""
        muting, cell.muting = cell.muting, None
        if muting is None:
            return
        for muted in muting:
            if muted.muted is not cell:
                continue  # muted on another since, or released already
            muted.muted = None
            if muted.parked:
                muted.parked = False
                if (
                    muted.stopped is None
                    and muted.mailbox
                    and self.cells.get(muted.address) is muted
                ):
                    self.ready.append(muted)
                    if self._idle and not self._waking:
                        self._wake()
                else:
                    self._unschedule(muted)

    def _wake(self) -> None:
        """Wake one idle dispatcher.

        One at a time: a woken dispatcher that takes a cell and finds more ready
        wakes the next (see :meth:`run`). So handlers that suspend get as many
        dispatchers as there are cells to run meanwhile, while handlers that never
        suspend, which one dispatcher runs back to back, do not wake and park every
        dispatcher for each burst of tells.
        """
        idle = self._idle
        while idle:
            waiter = idle.popleft()
            if not waiter.done():
                waiter.set_result(None)
                self._waking += 1
                return

    async def passivate(self, address: str) -> bool:
        """Drop the idle actor at ``address`` (see :meth:`Runtime.passivate`)."""
        cell = self.cells.get(address)
        if cell is None:
            return True
        if cell.scheduled or cell.mailbox or cell.stopped is not None:
            return False
        del self.cells[address]
        actor, cell.actor = cell.actor, None
        if actor is not None:
            kind = cell.kind.name
            self.passivated[kind] = self.passivated.get(kind, 0) + 1
            await call_stop_hook(address, actor)
        return True

    def discard(self, address: str) -> int:
        """Forget the actor at ``address`` now, busy or not (see :meth:`Runtime.discard`).

        Returns:
            How many messages waiting in its mailbox were dropped.
        """
        cell = self.cells.pop(address, None)
        if cell is None:
            return 0
        mailbox = cell.mailbox
        dropped = 0
        if mailbox is not None:
            # Emptied in place: a dispatcher running the cell now holds this deque
            # and stops after the message in hand.
            dropped = len(mailbox)
            mailbox.clear()
        cell.actor = None
        space, cell.space = cell.space, None
        if space is not None:
            space.set()  # senders waiting for room go to a new cell
        self.release(cell)
        return dropped

    def census(self) -> Census:
        """Count live and stopped actors and the mail waiting, in one walk (forgetting
        the stopped actors whose back-off is over)."""
        depth = deepest = active = 0
        by_kind: dict[str, int] = {}
        for cell in self.cells.values():
            if cell.mailbox:
                n = len(cell.mailbox)
                depth += n
                deepest = max(deepest, n)
            if cell.actor is not None:
                active += 1
                kind = cell.kind.name
                by_kind[kind] = by_kind.get(kind, 0) + 1
        for address, stopped in list(self.stopped.items()):
            if stopped.left() == 0:
                del self.stopped[address]
        return Census(active, len(self.stopped), depth, deepest, by_kind)

    async def stop_actors(self) -> None:
        """Run every live actor's ``on_stop`` (shutdown, after the dispatchers ended)."""
        for cell in self.cells.values():
            if cell.actor is not None:
                await call_stop_hook(cell.address, cell.actor)

    def close(self) -> None:
        """Fail the mail nobody will handle now (shutdown) and wake waiting senders."""
        for cell in self.cells.values():
            if cell.mailbox:
                for env in cell.mailbox:
                    self._asks.fail_envelope(
                        env,
                        RuntimeClosedError(
                            f"runtime shut down before {cell.address} handled "
                            f"{type(env.body).__name__}"
                        ),
                    )
                cell.mailbox = None
            if cell.space is not None:
                cell.space.set()
            self.release(cell)
        self.ready.clear()

    def _unschedule(self, cell: Cell) -> None:
        """End ``cell``'s turn with nothing more to run now: out of the ready queue,
        its mailbox (when empty) dropped or kept as a spare."""
        cell.scheduled = False
        mailbox = cell.mailbox
        if mailbox is not None and not mailbox:
            cell.mailbox = None
            if len(self._spare) < SPARE_MAILBOXES:
                self._spare.append(mailbox)
