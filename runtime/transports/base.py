"""The transport interface: how envelopes reach a mailbox, wherever the actor lives.

A transport carries envelopes from senders to the runtime that hosts the
recipient, and replies back to the runtime whose ask is waiting. The runtime is
the transport's *host*: it delivers envelopes into local mailboxes and resolves
replies. The in-process transport calls the host directly; the Redis transport
puts envelopes on shard streams and has the owning worker's runtime deliver them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from actormem.runtime._envelope import Envelope, Reply

if TYPE_CHECKING:
    from actormem.runtime._actor import Actor
    from actormem.runtime.errors import ActorError
    from actormem.runtime.metrics import Metrics

__all__ = ("Transport", "TransportHost")


class TransportHost(Protocol):
    """What a transport may ask of the runtime that opened it."""

    @property
    def is_open(self) -> bool:
        """True once the runtime is fully open and until its shutdown starts."""

    @property
    def shed_expired_asks(self) -> bool:
        """True when asks (and replies) whose deadline passed may be dropped unsent."""

    async def deliver(self, envelope: Envelope) -> None:
        """Put an envelope into its local mailbox, waiting while the mailbox is full."""

    def deliver_nowait(self, envelope: Envelope) -> None:
        """Put an envelope into its local mailbox or raise ``MailboxFullError``."""

    def resolve(self, reply: Reply) -> None:
        """Hand a reply to the ask that waits for it (dropped if nobody waits)."""

    async def passivate(self, address: str) -> bool:
        """Drop an idle actor from memory (its state is stored); False if it is busy."""

    def discard(self, address: str) -> int:
        """Forget an actor at once, busy or not, dropping its waiting mail; returns
        how many messages were dropped."""

    def local_addresses(self, kind: str) -> list[str]:
        """Addresses of the actors of ``kind`` active in this runtime."""

    def spawn(self, func: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run a background task in the runtime's task group (cancelled at close)."""


class Transport(ABC):
    """Carries envelopes and replies between runtimes.

    A transport is opened once by one runtime and closed by it; it refuses to be
    opened twice.
    """

    #: The name configs use for this transport (``local``, ``redis``).
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

    def resend_after(self) -> float | None:
        """Seconds an ask waits for its reply before its envelope is sent again,
        unchanged (the same command id and correlation), or None to send it once.

        A transport that can lose a reply (a worker dies after storing a command's
        effect and before its reply went out) resends: the copy is deduplicated by
        its command id and answered with the reply kept with the effect. In process
        nothing is lost on the way, so the in-process transport sends once.
        """
        return None

    async def take_due(self, kind: str, retry_after: float) -> list[str]:
        """The actors of ``kind`` whose stored due time (``DurableChanges.due_at``)
        passed, among those this process serves; each one's due time moves
        ``retry_after`` seconds on (found again then, unless its actor sets another).

        A transport that keeps no state keeps no due times either: none.
        """
        return []

    async def resend(self, envelope: Envelope) -> None:
        """Send ``envelope`` again (see :meth:`resend_after`)."""
        await self.send(envelope)

    @abstractmethod
    async def reply(self, envelope: Envelope, reply: Reply) -> None:
        """Carry ``reply`` back to whoever asked ``envelope``."""

    # Optional hooks for transports that store effects (Redis). The runtime calls
    # them only when a transport overrides ``handled``, so the in-process path
    # pays nothing for them.

    async def activated(self, address: str, actor: Actor) -> None:  # noqa: B027 (optional hook)
        """Called when the runtime made a fresh actor, before its ``on_start``.

        A transport with durable state loads it into the actor here.
        """

    async def handled(self, envelope: Envelope, actor: Actor | None, ok: bool) -> bool:
        """Called after the actor handled ``envelope``, before any reply is sent.

        Args:
            envelope: the message handled.
            actor: the actor that handled it.
            ok: False when the handler raised an unexpected exception.

        Returns:
            True when the effect is stored (the runtime then sends the reply);
            False when it is not: the runtime drops the actor's in-memory state
            (it is reloaded on its next message) and sends no success reply.
        """
        return True

    def batchable(self, envelope: Envelope) -> bool:
        """Whether ``envelope`` may join a batch: a run of one actor's commands
        handled one after the other and settled together by :meth:`handled_batch`
        (one change set for all of them). False by default: every envelope is
        settled on its own by :meth:`handled`."""
        return False

    async def handled_batch(self, envelopes: list[Envelope], actor: Actor) -> bool | None:
        """Called after the actor handled every one of ``envelopes`` (each
        :meth:`batchable`, in mailbox order, none raising an unexpected exception),
        before any reply to them is sent.

        Returns:
            True when their effect is stored (the runtime then sends the replies);
            False when it is not: the runtime drops the actor's in-memory state and
            sends no reply; None when their changes cannot be kept as one set: the
            runtime drops the actor's in-memory state and handles ``envelopes``
            again, one at a time, on a fresh activation (see :meth:`again`).
        """
        ok = True
        for envelope in envelopes:
            ok = await self.handled(envelope, actor, True) and ok
        return ok

    def again(self, envelope: Envelope) -> None:  # noqa: B027 (optional hook)
        """Called when the runtime will handle ``envelope`` again, in order, on a fresh
        activation: its batch could not be stored, or a later command of its batch
        raised an unexpected exception before the batch's changes were taken (the
        actor's memory then holds changes of it that are not stored). What its first
        handling sent is sent again with the same ids."""

    async def starting(self, envelope: Envelope) -> None:  # noqa: B027 (optional hook)
        """Called just before the actor handles an envelope whose ``track_start``
        is True (the Redis transport counts the attempts at an entry delivered
        again, so only a command that was being handled when its worker died counts
        towards ``max_deliveries``)."""

    async def retry(self, envelope: Envelope, allowed: bool) -> bool:
        """Called after a handler failed on ``envelope`` (and :meth:`handled` was told).

        Args:
            allowed: False when the actor's restart budget could not take another
                failure (a retry might escalate it): give the envelope up.

        Returns:
            True to have the runtime deliver ``envelope`` again at once, before the
            actor's other mail (so one actor's commands keep their order), without
            answering its asker yet; False to fail it now (the asker gets the error).
        """
        return False

    async def undeliverable(self, envelope: Envelope, error: ActorError) -> None:  # noqa: B027 (optional hook)
        """Called when the runtime refuses ``envelope`` for a reason of its own (an
        address no actor can have, a factory that refuses it, an actor stopped in
        its back-off); the runtime answers the asker itself. A transport that
        stores entries dead-letters it with ``error`` as the reason."""

    def instrument(self, metrics: Metrics) -> None:  # noqa: B027 (optional hook)
        """Called before :meth:`open` when the runtime serves metrics: a transport
        adds its own families (``metrics.add``) and records its own events."""

    def dropped(self, envelope: Envelope) -> None:  # noqa: B027 (optional hook)
        """Called when the runtime fails ``envelope`` without handling it
        (actor stopped, activation failed, shutdown)."""
