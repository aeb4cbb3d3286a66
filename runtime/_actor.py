"""The actor base class, its context, and references to actors."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, overload

from actormem.runtime._envelope import Command
from actormem.runtime.errors import ActormemError
from actormem.runtime.ids import split_address

if TYPE_CHECKING:
    from actormem.runtime._runtime import Runtime

__all__ = ("Actor", "ActorContext", "ActorRef", "Forward", "split_address")

R = TypeVar("R")
T = TypeVar("T")


class Forward:
    """What a handler returns to hand the message it is handling on to another actor.

    Made by :meth:`ActorContext.forward`. The runtime sends ``message`` to
    ``address`` with this actor as its sender; an ask is answered by that actor,
    straight to the asker, and the forwarding actor goes on with its mailbox.
    """

    __slots__ = ("address", "message")

    def __init__(self, address: str, message: Any) -> None:
        self.address = address
        self.message = message

    def __repr__(self) -> str:
        return f"Forward({self.address!r}, {type(self.message).__name__})"


class ActorContext:
    """What an actor knows of the world: its address, its runtime, and who sent the
    message it is handling.

    Attributes:
        address: ``"kind/key"``.
        kind: the registered kind (``memory``, ``pool``, ...).
        key: the actor's key within its kind (``alice`` in ``memory/alice``).
        runtime: the runtime hosting the actor.
        sender: the address of the actor that sent the message being handled (the
            runtime's record of it, the envelope's sender), or None when it was
            sent from outside any actor (``rt.tell``, ``rt.ask``, a handle).
        asked: False while the message being handled is a tell, whose reply nobody
            reads (a handler may skip building one); True for an ask, and by default.
    """

    __slots__ = ("address", "asked", "key", "kind", "runtime", "sender")

    def __init__(self, runtime: Runtime, address: str) -> None:
        self.runtime = runtime
        self.address = address
        self.kind, self.key = split_address(address)
        self.sender: str | None = None
        self.asked = True

    async def tell(self, address: str, message: Any) -> None:
        """Send ``message`` to ``address`` as this actor (its recipient sees this
        actor's address as the sender); waits while the mailbox is full.

        Raises:
            ActorStoppedError: the actor is stopped.
            ActorNotFoundError: no actor of that kind is registered.
            RuntimeClosedError: the runtime is closed.
        """
        await self.runtime._tell_as(self.address, address, message)

    def tell_nowait(self, address: str, message: Any) -> None:
        """Send ``message`` to ``address`` as this actor now, or raise; never waits.

        Raises:
            MailboxFullError: the mailbox is full; nothing was enqueued.
            ActorStoppedError: the actor is stopped.
            ActorNotFoundError: no actor of that kind is registered.
            RuntimeClosedError: the runtime is closed.
        """
        self.runtime._tell_as_nowait(self.address, address, message)

    def forward(self, address: str, message: Any) -> Forward:
        """Return what ``receive`` returns to hand ``message`` on to ``address``
        as this actor: the recipient answers the original asker (see :class:`Forward`)."""
        return Forward(address, message)

    def ref(self, address: str) -> ActorRef[Any]:
        """Return a reference to another actor."""
        return self.runtime.ref(address)

    def pipe(
        self,
        work: Callable[[], Awaitable[Any]],
        to: str | None = None,
        wrap: Callable[[Any, BaseException | None], Any] | None = None,
    ) -> None:
        """Run ``work`` in the background and tell its outcome to an actor (self by default).

        The actor keeps serving its mailbox meanwhile (Akka's ``pipeTo``). ``wrap``
        turns ``(result, error)`` into the message that is sent; without it the
        result itself is sent and an error is only logged.
        """
        self.runtime.pipe(work, to or self.address, wrap, sender=self.address)


class Actor:
    """Base of every actor: subclass it and implement :meth:`receive`.

    An actor handles one message at a time, in mailbox order; its state needs no
    locks. An idle actor is just this object: no task waits on its behalf.

    Class attributes:
        expected_errors: exceptions that are answers, not crashes (bad input, say):
            they fail the ask that caused them and do not count as a restart.
    """

    expected_errors: ClassVar[tuple[type[BaseException], ...]] = (ActormemError,)
    #: Set True only when ``receive`` never suspends (no ``await`` that yields).
    #: Then an ask to this actor while it is idle and local runs in the asker's
    #: task, skipping the mailbox round trip; one message at a time and mailbox
    #: order still hold (queued mail is always handled first).
    inline_asks: ClassVar[bool] = False

    __slots__ = ("ctx",)

    def __init__(self, ctx: ActorContext) -> None:
        self.ctx = ctx

    async def on_start(self) -> None:
        """Called once before the first message (after a reset, too)."""

    async def on_stop(self) -> None:
        """Called when the actor stops (runtime shutdown or restart intensity)."""

    async def receive(self, message: Any) -> Any:
        """Handle one message; the return value is the reply when it was an ask."""
        raise NotImplementedError


class ActorRef(Generic[R]):
    """A handle on an actor at an address; cheap to make, safe to keep.

    Sending never needs the actor to exist yet: the runtime activates it from its
    registered kind on the first message.
    """

    __slots__ = ("address", "runtime")

    def __init__(self, runtime: Runtime, address: str) -> None:
        self.runtime = runtime
        self.address = address

    def __repr__(self) -> str:
        return f"ActorRef({self.address!r})"

    async def tell(self, message: Any) -> None:
        """Send ``message``; wait while the mailbox is full (backpressure).

        Raises:
            ActorStoppedError: the actor is stopped.
            ActorNotFoundError: no actor of that kind is registered.
            RuntimeClosedError: the runtime is closed.
        """
        await self.runtime.tell(self.address, message)

    def tell_nowait(self, message: Any) -> None:
        """Send ``message`` now or raise; never waits.

        Raises:
            MailboxFullError: the mailbox is full; nothing was enqueued.
            ActorStoppedError: the actor is stopped.
            ActorNotFoundError: no actor of that kind is registered.
            RuntimeClosedError: the runtime is closed.
        """
        self.runtime.tell_nowait(self.address, message)

    @overload
    async def ask(self, message: Command[T], timeout: float | None = None) -> T: ...
    @overload
    async def ask(self, message: object, timeout: float | None = None) -> Any: ...
    async def ask(self, message: object, timeout: float | None = None) -> Any:
        """Send ``message`` and return the actor's reply (typed by a :class:`Command`).

        Args:
            timeout: seconds to wait (the runtime's ``ask_timeout`` by default).

        Raises:
            AskTimeoutError: no reply within ``timeout``.
            HandlerError: the handler crashed on this message.
            ActorStoppedError: the actor stopped before answering.
            Exception: any error of the actor's ``expected_errors`` that the
                handler raised, as it was raised.
        """
        return await self.runtime.ask(self.address, message, timeout)
