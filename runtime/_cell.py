"""An actor's cell: its kind, the actor object, and a mailbox only while it holds mail."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import anyio

from actormem.runtime._actor import Actor, ActorContext
from actormem.runtime._envelope import Envelope
from actormem.runtime.config import SupervisionConfig

__all__ = ("ActorFactory", "Cell", "Kind")

ActorFactory = Callable[[ActorContext], Actor]


class Kind:
    """A registered actor kind: how to make its actors and how to supervise them."""

    __slots__ = ("factory", "mailbox_size", "name", "supervision")

    def __init__(
        self, name: str, factory: ActorFactory, supervision: SupervisionConfig, mailbox_size: int
    ) -> None:
        self.name = name
        self.factory = factory
        self.supervision = supervision
        self.mailbox_size = mailbox_size


class Cell:
    """One actor's slot: small while idle (no task, no mailbox deque).

    Attributes:
        actor: the actor object, None until activated (and after a reset).
        mailbox: the waiting envelopes, None while there are none.
        scheduled: the cell is in the ready queue or being run.
        stopped: why supervision stopped the actor, None while it may run.
        restarts: when its recent restarts happened (monotonic seconds).
        space: set when a full mailbox takes a message off (senders wait on it).
        single: how many messages at the front of the mailbox are handled one at a
            time, not as a batch (a batch to handle again, see ``Dispatcher``).
        muted: the overloaded cell this one sent to past its bound, from a
            dispatcher: this one takes no more turns until that one has room
            (see :meth:`Mailboxes.deliver`).
        parked: muted with mail left; scheduled, but out of the ready queue.
        muting: the cells muted on this one, released when it has room.
    """

    __slots__ = (
        "actor",
        "address",
        "kind",
        "mailbox",
        "muted",
        "muting",
        "parked",
        "restarts",
        "scheduled",
        "single",
        "space",
        "stopped",
    )

    def __init__(self, address: str, kind: Kind) -> None:
        self.address = address
        self.kind = kind
        self.actor: Actor | None = None
        self.mailbox: deque[Envelope] | None = None
        self.scheduled = False
        self.stopped: str | None = None
        self.restarts: deque[float] | None = None
        self.space: anyio.Event | None = None
        self.single = 0
        self.muted: Cell | None = None
        self.parked = False
        self.muting: list[Cell] | None = None
