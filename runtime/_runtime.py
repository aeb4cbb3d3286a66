"""The runtime: the public face of the actor machinery.

A :class:`Runtime` opens and closes everything (one task group owns the
dispatchers and the transport's loops), registers actor kinds, is where tells and
asks enter, and counts. Its parts live beside it: the cells and their mailboxes
(``_mailboxes``), the dispatcher tasks (``_dispatch``), the ids of a handler's
tells (``_handling``), the asks waiting for replies (``_asks``), what happens when
a handler crashes (``_supervision``) and piped background work (``_pipes``).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Final, Literal, Self, TypeVar, overload

import anyio
import anyio.abc
import msgspec

from actormem.runtime import collector
from actormem.runtime._actor import ActorRef, Forward
from actormem.runtime._asks import Asks
from actormem.runtime._cell import ActorFactory, Kind
from actormem.runtime._dispatch import Dispatcher
from actormem.runtime._envelope import Command, Envelope, Reply
from actormem.runtime._handling import derived_id, handling, outside_handling
from actormem.runtime._pipes import Pipes
from actormem.runtime._supervision import STOP_HOOK_TIMEOUT, Supervisor
from actormem.runtime.closing import AsyncClosing
from actormem.runtime.config import MetricsConfig, RuntimeConfig, SupervisionConfig
from actormem.runtime.errors import MailboxFullError, RuntimeClosedError
from actormem.runtime.ids import split_address
from actormem.runtime.transports.base import Transport
from actormem.runtime.transports.local import LocalTransport

if TYPE_CHECKING:
    from actormem.runtime.metrics import Metrics

__all__ = ("ActorFactory", "Runtime", "RuntimeStats")

R = TypeVar("R")

#: The command being handled now, if any (see ``_handling``).
_handling_now: Final = handling.get
#: How often the shutdown drain looks whether everything is quiet.
_DRAIN_POLL: Final = 0.002


async def _await(func: Callable[..., Awaitable[Any]], *args: Any) -> None:
    # A task group starts coroutine functions; ``func`` may return any awaitable.
    await func(*args)


class RuntimeStats(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of the runtime's counters.

    Attributes:
        actors: addresses that have a cell (activated, or with mail waiting).
        active: actors whose object is alive.
        stopped: actors stopped by supervision whose back-off is not over.
        processed: messages taken from mailboxes since start (handled or shed).
        failures: handler crashes (not counting expected errors).
        rejected: messages answered with an expected error (bad input).
        restarts: restarts done by supervision.
        mailbox_depth: messages waiting in all mailboxes.
        max_mailbox_depth: the deepest mailbox now.
        pending_asks: asks waiting for a reply.
        expired: asks dropped unhandled because their deadline had passed
            (``runtime.shed_expired_asks``).
    """

    actors: int
    active: int
    stopped: int
    processed: int
    failures: int
    rejected: int
    restarts: int
    mailbox_depth: int
    max_mailbox_depth: int
    pending_asks: int
    expired: int


class Runtime(AsyncClosing):
    """Hosts actors: an async context manager that owns one anyio task group.

    Register actor kinds, then talk to actors by address (``"kind/key"``); an actor
    is created from its kind on its first message.

    Args:
        config: the runtime section of the config (defaults if omitted).
        transport: how envelopes travel; in-process by default.
        metrics: the ``[metrics]`` section: with a ``port``, the runtime serves
            Prometheus metrics there while it is open (:attr:`metrics`).

    Attributes:
        metrics: the runtime's :class:`~actormem.runtime.metrics.Metrics` when
            ``metrics.port`` is set (None when it is 0): an application adds its own
            families with ``metrics.add``.

    Example::

        async with Runtime() as rt:
            rt.register("echo", Echo)
            assert await rt.ref("echo/a").ask("hi") == "hi"
    """

    def __init__(
        self,
        config: RuntimeConfig | None = None,
        *,
        transport: Transport | None = None,
        metrics: MetricsConfig | None = None,
    ) -> None:
        self.config = config or RuntimeConfig()
        self.metrics_config = metrics or MetricsConfig()
        self.metrics: Metrics | None = None
        self._endpoint: anyio.abc.Listener[anyio.abc.SocketStream] | None = None
        self.transport: Transport = transport or LocalTransport()
        # Only transports that store effects (Redis) take the per-message hooks.
        hooked = type(self.transport).handled is not Transport.handled
        self._kinds: dict[str, Kind] = {}
        self._asks = Asks(self.config, self.transport, hooked)
        self._supervisor = Supervisor(self._asks)
        self._dispatch = Dispatcher(self, self._kinds, self._asks, self._supervisor, hooked=hooked)
        self._cells = self._dispatch.cells
        if self.metrics_config.port:
            # Imported only when on: a runtime without metrics never loads it.
            from actormem.runtime.metrics import Metrics

            self.metrics = Metrics(self._dispatch, self._kinds, self._asks, self._supervisor)
            self._dispatch.metrics = self.metrics
            self.transport.instrument(self.metrics)
        #: Put an envelope into its local mailbox, or raise :class:`MailboxFullError`
        #: (the dispatcher's own method: every in-process tell calls it).
        self.deliver_nowait: Callable[[Envelope], None] = self._dispatch.deliver_nowait
        self._state: Literal["new", "open", "closing", "closed"] = "new"
        # Inline asks need the actor to live here, which only the local transport promises.
        self._inline_ok = type(self.transport) is LocalTransport
        self._tg: anyio.abc.TaskGroup | None = None
        self._pipes = Pipes(self._tell_as)
        self._unyielded = 0
        # Sends between two turns given up by a producer that never waits (config is frozen).
        self._throughput = self.config.throughput
        self._gc_held = False
        # Services waiting for the runtime to open (see on_open).
        self._opening: list[tuple[Callable[..., Awaitable[Any]], tuple[Any, ...]]] = []

    # -- lifecycle -----------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._state != "new":
            raise RuntimeError("a Runtime can be opened only once")
        self._state = "closing"  # nothing may be sent until the transport is up
        try:
            endpoint = await self._open_metrics()
        except BaseException:
            self._state = "closed"
            raise
        self._gc_held = collector.hold(self.config.gc_threshold, self.config.gc_freeze)
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = self._asks.tg = tg
        try:
            if endpoint is not None:
                tg.start_soon(endpoint)
            for _ in range(self.config.dispatchers):
                await tg.start(self._dispatch.run)
            await self.transport.open(self)
        except BaseException as exc:
            tg.cancel_scope.cancel()
            self._state = "closed"
            self._release_gc()
            await self._close_endpoint()
            try:
                await tg.__aexit__(type(exc), exc, exc.__traceback__)
            except BaseExceptionGroup as group:
                # The task group wraps the error that stopped the start (say, an
                # unreachable Redis) in a group; the caller wants that error itself.
                if group.exceptions != (exc,):
                    raise
            raise
        self._state = "open"
        opening, self._opening = self._opening, []
        for func, args in opening:
            self.spawn(func, *args)
        return self

    async def _open_metrics(self) -> Callable[[], Coroutine[Any, Any, None]] | None:
        """Bind the metrics endpoint, if ``[metrics] port`` is set; return what serves
        it (in the task group).

        Raises:
            ConfigError: the port is taken or cannot be bound.
        """
        metrics = self.metrics
        if metrics is None:
            return None
        from actormem.runtime.metrics import open_endpoint, serve

        config = self.metrics_config
        listener = self._endpoint = await open_endpoint(config)
        return functools.partial(serve, metrics, listener, f"{config.host}:{config.port}")

    async def aclose(self) -> None:
        """Stop: drain mailboxes (up to ``drain_timeout``), stop actors, fail what is left.

        Every ask still waiting afterwards fails with :class:`RuntimeClosedError`;
        nothing hangs. Idempotent.
        """
        if self._state in ("new", "closed") or self._tg is None:
            self._state = "closed"
            return
        self._state = "closing"
        dispatch = self._dispatch
        with anyio.move_on_after(self.config.drain_timeout, shield=True):
            while dispatch.ready or dispatch.busy or self._pipes.running:  # noqa: ASYNC110 (a bounded poll at shutdown)
                await anyio.sleep(_DRAIN_POLL)
        self._state = "closed"
        tg, self._tg = self._tg, None
        self._asks.tg = None
        tg.cancel_scope.cancel()
        try:
            # The task group must be left in the scope it was entered in, so this
            # await is not shielded; the cancelled children end at once.
            await tg.__aexit__(None, None, None)
        finally:
            with anyio.CancelScope(shield=True):
                await dispatch.stop_actors()
                with anyio.move_on_after(STOP_HOOK_TIMEOUT):
                    await self.transport.aclose()
            dispatch.close()
            self._asks.close()
            self._release_gc()
            await self._close_endpoint()

    async def _close_endpoint(self) -> None:
        # Closed here too: a serving task cancelled before it ran never closes it.
        listener, self._endpoint = self._endpoint, None
        if listener is not None:
            with anyio.CancelScope(shield=True):
                await listener.aclose()

    def _release_gc(self) -> None:
        if self._gc_held:
            self._gc_held = False
            collector.release()

    def _check_open(self) -> None:
        if self._state != "open" and self._state != "closing":
            raise RuntimeClosedError(
                "the runtime is not open (use 'async with Runtime(...) as rt')"
                if self._state == "new"
                else "the runtime is closed"
            )

    @property
    def is_open(self) -> bool:
        """True between ``__aenter__`` and the start of shutdown."""
        return self._state == "open"

    @property
    def shed_expired_asks(self) -> bool:
        """``runtime.shed_expired_asks``: asks whose deadline passed are dropped unhandled."""
        return self.config.shed_expired_asks

    # -- registry --------------------------------------------------------------

    def register(
        self,
        kind: str,
        factory: ActorFactory,
        *,
        supervision: SupervisionConfig | None = None,
        mailbox_size: int | None = None,
    ) -> None:
        """Register an actor kind: addresses ``kind/<key>`` are served by ``factory``.

        Args:
            kind: the kind's name (no ``/``).
            factory: called with an :class:`ActorContext` to make the actor.
            supervision: this kind's restart policy (the config's by default).
            mailbox_size: this kind's mailbox bound (the config's by default).

        Raises:
            ValueError: the kind's name is empty or holds a ``/``, or is taken.
        """
        if not kind or "/" in kind:
            raise ValueError(f"an actor kind is a name without '/', got {kind!r}")
        if kind in self._kinds:
            raise ValueError(f"actor kind {kind!r} is already registered")
        size = mailbox_size if mailbox_size is not None else self.config.mailbox_size
        if size < 1:
            raise ValueError(f"mailbox_size must be >= 1, got {size}")
        self._kinds[kind] = Kind(kind, factory, supervision or self.config.supervision, size)

    def has_kind(self, kind: str) -> bool:
        """True when ``kind`` is registered here."""
        return kind in self._kinds

    def ref(self, address: str) -> ActorRef[Any]:
        """Return a reference to the actor at ``address`` (``"kind/key"``).

        Raises:
            InvalidAddressError: (a ``ValueError``) the address is not ``kind/key``.
        """
        split_address(address)
        return ActorRef(self, address)

    def _check_address(self, address: str) -> None:
        # An address with a cell was checked when the cell was made.
        if address not in self._cells:
            split_address(address)

    # -- sending -----------------------------------------------------------------

    async def tell(self, address: str, message: Any) -> None:
        """Send ``message`` to ``address``, waiting while its mailbox is full.

        Raises:
            InvalidAddressError: the address is not ``kind/key`` (nothing is sent).
        """
        # _check_open(), _check_address() and _send() inlined where they have nothing
        # to do: a tell is the hottest call there is, and in process it mostly has
        # nothing to wait for (a mailbox with room, no turn to give up).
        if self._state != "open":
            self._check_open()
        if address not in self._cells:
            split_address(address)
        # derived_id() only while a command is handled: a tell from outside any
        # handler has no id to derive.
        if _handling_now() is None:
            envelope = Envelope(recipient=address, body=message)
        else:
            envelope = Envelope(recipient=address, body=message, id=derived_id())
        if self._inline_ok and self._unyielded + 1 < self._throughput:
            try:
                # The local transport's send_nowait, without its hop: the runtime is open.
                self.deliver_nowait(envelope)
            except MailboxFullError:
                pass
            else:
                self._unyielded += 1
                return
        await self._send(envelope)

    async def _tell_as(self, sender: str | None, address: str, message: Any) -> None:
        """:meth:`tell` with ``sender`` as the envelope's sender (:meth:`ActorContext.tell`)."""
        self._check_open()
        self._check_address(address)
        await self._send(Envelope(recipient=address, body=message, id=derived_id(), sender=sender))

    def _tell_as_nowait(self, sender: str | None, address: str, message: Any) -> None:
        """:meth:`tell_nowait` with ``sender`` as the envelope's sender."""
        self._check_open()
        self._check_address(address)
        self.transport.send_nowait(
            Envelope(recipient=address, body=message, id=derived_id(), sender=sender)
        )

    async def _send(self, envelope: Envelope) -> None:
        if self._inline_ok:  # in process: straight into the mailbox unless it is full
            try:
                self.transport.send_nowait(envelope)
            except MailboxFullError:
                await self.transport.send(envelope)
        else:
            await self.transport.send(envelope)
        # Inline, not _yield_now_and_then(): a tell is the hottest call there is.
        self._unyielded += 1
        if self._unyielded >= self._throughput:
            self._unyielded = 0
            await asyncio.sleep(0)  # see _yield_now_and_then

    async def _yield_now_and_then(self) -> None:
        # A producer whose sends never block would otherwise never let the
        # dispatchers run until every mailbox was full.
        self._unyielded += 1
        if self._unyielded >= self._throughput:
            self._unyielded = 0
            # asyncio's, not anyio.lowlevel.checkpoint(), which asks sniffio which
            # event loop runs on every call: the runtime runs on asyncio only.
            await asyncio.sleep(0)

    def tell_nowait(self, address: str, message: Any) -> None:
        """Send ``message`` to ``address`` now, or raise :class:`MailboxFullError`
        (or :class:`InvalidAddressError`: the address is not ``kind/key``)."""
        self._check_open()
        self._check_address(address)
        self.transport.send_nowait(Envelope(recipient=address, body=message, id=derived_id()))

    @overload
    async def ask(self, address: str, message: Command[R], timeout: float | None = None) -> R: ...
    @overload
    async def ask(self, address: str, message: object, timeout: float | None = None) -> Any: ...
    async def ask(self, address: str, message: object, timeout: float | None = None) -> Any:
        """Send ``message`` to ``address`` and return the reply (see :meth:`ActorRef.ask`).

        The reply is typed by the command's type argument for a :class:`Command`.

        Raises:
            InvalidAddressError: the address is not ``kind/key`` (nothing is sent).
        """
        # _check_open() and _check_address() inlined where they have nothing to do,
        # as in tell(): an inline ask is every in-process handle call.
        if self._state != "open":
            self._check_open()
        cell = self._cells.get(address)
        if cell is None:
            split_address(address)
        elif (
            self._inline_ok
            and not cell.scheduled
            and cell.stopped is None
            and (actor := cell.actor) is not None
            and actor.inline_asks
        ):
            try:
                value = await self._dispatch.run_inline(cell, actor, message)
            finally:
                # _yield_now_and_then(), inline.
                self._unyielded += 1
                if self._unyielded >= self._throughput:
                    self._unyielded = 0
                    await asyncio.sleep(0)
            if type(value) is Forward:  # handed on: its recipient answers
                self._check_address(value.address)
                return await self._asks.ask(value.address, value.message, timeout, sender=address)
            return value
        return await self._asks.ask(address, message, timeout)

    def pipe(
        self,
        work: Callable[[], Awaitable[Any]],
        to: str,
        wrap: Callable[[Any, BaseException | None], Any] | None = None,
        *,
        sender: str | None = None,
    ) -> None:
        """Run ``work`` in the runtime's task group and tell its outcome to ``to``
        (as ``sender``: the actor that piped it).

        See :meth:`ActorContext.pipe`.

        Raises:
            InvalidAddressError: ``to`` is not ``kind/key`` (nothing runs).
        """
        self._check_open()
        split_address(to)
        assert self._tg is not None
        # The outcome is no send of the command being handled: its id is its own.
        with outside_handling():
            self._tg.start_soon(self._pipes.run, work, to, wrap, sender)

    # -- the transport's host side ------------------------------------------------

    async def deliver(self, envelope: Envelope) -> None:
        """Put ``envelope`` into its local mailbox, waiting while the mailbox is full."""
        await self._dispatch.deliver(envelope)

    def resolve(self, reply: Reply) -> None:
        """Hand ``reply`` to the ask waiting for it; a late reply is dropped."""
        self._asks.resolve(reply)

    async def passivate(self, address: str) -> bool:
        """Drop the idle actor at ``address`` from memory (a virtual actor's state
        is stored by its transport; the next message activates it again).

        Returns:
            True if it was dropped (or was not here); False if it has mail or is running.
        """
        return await self._dispatch.passivate(address)

    def discard(self, address: str) -> int:
        """Forget the actor at ``address`` at once, even with mail or a handler running:
        for a transport whose right to the actor's stored state has gone (a lost
        lease). Its waiting mail is dropped (the transport delivers it again), a
        handler running finishes against an actor nobody reaches any more, and the
        next message makes a new actor from what is stored.

        Returns:
            How many waiting messages were dropped.
        """
        return self._dispatch.discard(address)

    def spawn(self, func: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run ``func(*args)`` as a task of the runtime's task group.

        For a transport's background loops: they end when the runtime closes
        (after the mailboxes drained, before the transport's ``aclose``). An
        exception escaping ``func`` crashes the runtime, so loops handle their own.
        """
        if self._tg is None:
            raise RuntimeClosedError("the runtime is not open")
        self._tg.start_soon(_await, func, *args)

    def on_open(self, func: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run ``func(*args)`` as a task of the runtime's task group once it is open
        (at once if it is): a service an actor kind needs in every process that
        hosts it (a sweeper, say). It ends when the runtime closes; an exception
        escaping it crashes the runtime.

        Raises:
            RuntimeClosedError: the runtime is closing or closed.
        """
        if self._state == "new":
            self._opening.append((func, args))
        elif self._state == "open":
            self.spawn(func, *args)
        else:
            raise RuntimeClosedError("the runtime is closed")

    async def take_due(self, kind: str, retry_after: float) -> list[str]:
        """The addresses of the actors of ``kind`` whose stored due time passed
        (``DurableChanges.due_at``), among those this process serves (over Redis: on
        the shards it owns); each one's due time moves ``retry_after`` seconds on.
        In process: none (state is not stored).

        Raises:
            TransportError: the transport failed.
        """
        return await self.transport.take_due(kind, retry_after)

    def local_addresses(self, kind: str) -> list[str]:
        """Addresses of the actors of ``kind`` active (activated, not stopped) here."""
        return [
            cell.address
            for cell in self._cells.values()
            if cell.kind.name == kind and cell.actor is not None and cell.stopped is None
        ]

    # -- introspection ------------------------------------------------------------------

    @property
    def processed(self) -> int:
        """Messages handled so far: :meth:`stats` ``.processed`` in constant time, to poll
        for completion (``stats`` walks every actor)."""
        return self._dispatch.processed

    def stats(self) -> RuntimeStats:
        """Return a snapshot of the counters: it walks every actor once (at 100,000
        actors a few ms), so poll it for a progress display, not in a tight loop; to
        wait for work to finish, poll :attr:`processed`."""
        dispatch = self._dispatch
        census = dispatch.census()
        return RuntimeStats(
            actors=len(self._cells),
            active=census.active,
            stopped=census.stopped,
            processed=dispatch.processed,
            failures=self._supervisor.failures,
            rejected=dispatch.rejected,
            restarts=self._supervisor.restarts,
            mailbox_depth=census.mailbox_depth,
            max_mailbox_depth=census.max_mailbox_depth,
            pending_asks=len(self._asks.pending),
            expired=dispatch.expired,
        )

    def stop_reason(self, address: str) -> str | None:
        """Why the actor at ``address`` stopped, while its back-off lasts (after it,
        the next message brings the actor back); None if it is not stopped."""
        return self._dispatch.stop_reason(address)
