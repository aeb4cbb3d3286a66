"""The transport interface: how envelopes reach a mailbox, wherever the actor lives.

A transport carries envelopes from senders to the runtime that hosts the
recipient, and replies back to the runtime whose ask is waiting. The runtime is
the transport's *host*: it delivers envelopes into local mailboxes and resolves
replies. The in-process transport calls the host directly; the Redis transport
puts envelopes on shard streams and has the owning worker's runtime deliver them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Protocol

from runtime._envelope import Envelope, Reply

__all__ = ("Transport", "TransportHost")


class TransportHost(Protocol):
    """What a transport may ask of the runtime that opened it."""

    async def deliver(self, envelope: Envelope) -> None:
        """Put an envelope into its local mailbox, waiting while the mailbox is full."""

    def deliver_nowait(self, envelope: Envelope) -> None:
        """Put an envelope into its local mailbox or raise ``MailboxFullError``."""

    def resolve(self, reply: Reply) -> None:
        """Hand a reply to the ask that waits for it (dropped if nobody waits)."""


class Transport(ABC):
    """Carries envelopes and replies between runtimes.

    A transport is opened once by one runtime and closed by it; it refuses to be
    opened twice.
    """

    #: The name configs use for this transport (``memory``, ``redis``).
    name: str = "abstract"

    @abstractmethod
    async def open(self, host: TransportHost) -> None:
        """Start carrying envelopes for ``host``.

        Raises:
            TransportError: the transport cannot start (for example, unreachable Redis).
            RuntimeError: the transport was opened before.
        """

    @abstractmethod
    async def aclose(self) -> None:
        """Stop carrying envelopes and release every resource; idempotent."""

    @abstractmethod
    async def send(self, envelope: Envelope) -> None:
        """Carry ``envelope`` to its recipient, waiting while the recipient is full.

        Raises:
            TransportError: the envelope cannot be carried.
            ActorError: the recipient refuses it (stopped, unknown kind).
        """

    @abstractmethod
    def send_nowait(self, envelope: Envelope) -> None:
        """Carry ``envelope`` now or raise; never waits.

        Raises:
            MailboxFullError: the recipient's mailbox is full.
            TransportError: the envelope cannot be carried without waiting.
        """

    @abstractmethod
    async def reply(self, envelope: Envelope, reply: Reply) -> None:
        """Carry ``reply`` back to whoever asked ``envelope``."""
