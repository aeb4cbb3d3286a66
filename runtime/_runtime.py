"""The runtime: actor cells, dispatchers, supervision, asks and shutdown.

How it runs (DESIGN.md, "Cheap actors"): every address that has received a
message has a *cell* (the actor object, a mailbox created only while it holds
mail, a ``scheduled`` flag). A cell with mail sits once in the ready queue; a
few dispatcher tasks take cells from it and run up to ``throughput`` messages of
each, one at a time. So an idle actor is a small object, not a parked task, and
one actor never runs two messages at once.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import time
from collections import deque
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, Final, Literal, Self, TypeVar, overload

import anyio
import anyio.lowlevel
import msgspec
import structlog

from actormem.runtime import _gc
from actormem.runtime._actor import Actor, ActorContext, ActorRef, split_address
from actormem.runtime._closing import AsyncClosing
from actormem.runtime._envelope import Command, Envelope, Reply
from actormem.runtime.config import RuntimeConfig, SupervisionConfig
from actormem.runtime.errors import (
    ActorError,
    ActorNotFoundError,
    ActorStoppedError,
    AskTimeoutError,
    HandlerError,
    MailboxFullError,
    RuntimeClosedError,
    TooManyAsksError,
)
from actormem.runtime.transports.base import Transport
from actormem.runtime.transports.local import LocalTransport

__all__ = ("ActorFactory", "Runtime", "RuntimeStats")

log = structlog.get_logger("actormem.runtime")

R = TypeVar("R")

ActorFactory = Callable[[ActorContext], Actor]

#: How long each actor's ``on_stop`` may take at shutdown.
_STOP_HOOK_TIMEOUT: Final = 5.0
#: How often the shutdown drain looks whether everything is quiet.
_DRAIN_POLL: Final = 0.002


class _Origin:
    """The command a dispatcher is handling, and how many tells its handler sent."""

    __slots__ = ("id", "sent")

    def __init__(self, command: str) -> None:
        self.id = command
        self.sent = 0


#: Longest id a derived one may have before it is hashed.
_MAX_DERIVED_ID: Final = 48

#: Set while a handler runs a command that has an id (over Redis, every one).
_handling: ContextVar[_Origin | None] = ContextVar("actormem_handling", default=None)


async def _receive_as_command(actor: Actor, env: Envelope) -> Any:
    """``actor.receive(env.body)``, with the tells it sends numbered after ``env.id``."""
    token = _handling.set(_Origin(env.id))
    try:
        return await actor.receive(env.body)
    finally:
        _handling.reset(token)


def _derived_id() -> str:
    """The id for a tell: ``<command id>.<n>`` for the n-th tell of a handler running
    a command with an id, so a redelivered command sends the same ids again and the
    recipients skip what they already applied; otherwise empty (the transport
    makes one)."""
    origin = _handling.get()
    if origin is None:
        return ""
    origin.sent += 1
    derived = f"{origin.id}.{origin.sent}"
    if len(derived) > _MAX_DERIVED_ID:  # a chain of relays: keep ids short
        derived = hashlib.blake2b(derived.encode(), digest_size=16).hexdigest()
    return derived


class RuntimeStats(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of the runtime's counters.

    Attributes:
        actors: addresses that have a cell (activated or stopped).
        active: actors whose object is alive.
        stopped: actors stopped by supervision.
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


class _Kind:
    __slots__ = ("factory", "mailbox_size", "name", "supervision")

    def __init__(
        self, name: str, factory: ActorFactory, supervision: SupervisionConfig, mailbox_size: int
    ) -> None:
        self.name = name
        self.factory = factory
        self.supervision = supervision
        self.mailbox_size = mailbox_size


class _Cell:
    """One actor's slot: small while idle (no task, no mailbox deque)."""

    __slots__ = ("actor", "address", "kind", "mailbox", "restarts", "scheduled", "space", "stopped")

    def __init__(self, address: str, kind: _Kind) -> None:
        self.address = address
        self.kind = kind
        self.actor: Actor | None = None
        self.mailbox: deque[Envelope] | None = None
        self.scheduled = False
        self.stopped: str | None = None
        self.restarts: deque[float] | None = None
        self.space: anyio.Event | None = None


class _Slot:
    """Where an ask's reply lands: an asyncio future (cheaper than an anyio Event
    and a cancel scope per ask; redis-py ties the runtime to asyncio anyway)."""

    __slots__ = ("future", "reply")

    def __init__(self, future: asyncio.Future[None]) -> None:
        self.future = future
        self.reply: Reply | None = None

    def fill(self, reply: Reply) -> None:
        self.reply = reply
        if not self.future.done():
            self.future.set_result(None)


def _expire(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_exception(TimeoutError())


class Runtime(AsyncClosing):
    """Hosts actors: an async context manager that owns one anyio task group.

    Register actor kinds, then talk to actors by address (``"kind/key"``); an actor
    is created from its kind on its first message.

    Args:
        config: the runtime section of the config (defaults if omitted).
        transport: how envelopes travel; in-process by default.

    Example::

        async with Runtime() as rt:
            rt.register("echo", Echo)
            assert await rt.ref("echo/a").ask("hi") == "hi"
    """

    def __init__(
        self, config: RuntimeConfig | None = None, *, transport: Transport | None = None
    ) -> None:
        self.config = config or RuntimeConfig()
        self.transport: Transport = transport or LocalTransport()
        # Only transports that store effects (Redis) take the per-message hooks.
        self._hooked = type(self.transport).handled is not Transport.handled
        self._kinds: dict[str, _Kind] = {}
        self._cells: dict[str, _Cell] = {}
        self._ready: deque[_Cell] = deque()
        self._pending: dict[int, _Slot] = {}
        self._correlation = itertools.count(1)
        self._state: Literal["new", "open", "closing", "closed"] = "new"
        # Inline asks need the actor to live here, which only the in-process transport promises.
        self._inline_ok = type(self.transport) is LocalTransport
        self._tg: Any = None
        # Dispatchers waiting for a cell with mail; a new ready cell wakes one.
        self._idle: deque[asyncio.Future[None]] = deque()
        self._busy = 0
        self._pipes = 0
        self._unyielded = 0
        self._processed = 0
        self._failures = 0
        self._rejected = 0
        self._expired = 0
        self._restarts = 0
        self._gc_held = False

    # -- lifecycle -----------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._state != "new":
            raise RuntimeError("a Runtime can be opened only once")
        self._state = "closing"  # nothing may be sent until the transport is up
        self._gc_held = _gc.hold(self.config.gc_threshold, self.config.gc_freeze)
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        try:
            for _ in range(self.config.dispatchers):
                await tg.start(self._dispatch_loop)
            await self.transport.open(self)
        except BaseException as exc:
            tg.cancel_scope.cancel()
            self._state = "closed"
            self._release_gc()
            try:
                await tg.__aexit__(type(exc), exc, exc.__traceback__)
            except BaseExceptionGroup as group:
                # The task group wraps the error that stopped the start (say, an
                # unreachable Redis) in a group; the caller wants that error itself.
                if group.exceptions != (exc,):
                    raise
            raise
        self._state = "open"
        return self

    async def aclose(self) -> None:
        """Stop: drain mailboxes (up to ``drain_timeout``), stop actors, fail what is left.

        Every ask still waiting afterwards fails with :class:`RuntimeClosedError`;
        nothing hangs. Idempotent.
        """
        if self._state in ("new", "closed") or self._tg is None:
            self._state = "closed"
            return
        self._state = "closing"
        with anyio.move_on_after(self.config.drain_timeout, shield=True):
            while self._ready or self._busy or self._pipes:  # noqa: ASYNC110 (a bounded poll at shutdown)
                await anyio.sleep(_DRAIN_POLL)
        self._state = "closed"
        tg, self._tg = self._tg, None
        tg.cancel_scope.cancel()
        try:
            # The task group must be left in the scope it was entered in, so this
            # await is not shielded; the cancelled children end at once.
            await tg.__aexit__(None, None, None)
        finally:
            with anyio.CancelScope(shield=True):
                await self._stop_actors()
                with anyio.move_on_after(_STOP_HOOK_TIMEOUT):
                    await self.transport.aclose()
            self._fail_leftovers()
            self._release_gc()

    def _release_gc(self) -> None:
        if self._gc_held:
            self._gc_held = False
            _gc.release()

    async def _stop_actors(self) -> None:
        for cell in self._cells.values():
            actor = cell.actor
            if actor is not None and type(actor).on_stop is not Actor.on_stop:
                await self._call_stop_hook(cell, actor)

    async def _call_stop_hook(self, cell: _Cell, actor: Actor) -> None:
        with anyio.move_on_after(_STOP_HOOK_TIMEOUT, shield=True):
            try:
                await actor.on_stop()
            except Exception:
                log.exception("actor_stop_hook_failed", actor=cell.address)

    def _fail_leftovers(self) -> None:
        for cell in self._cells.values():
            if cell.mailbox:
                for env in cell.mailbox:
                    self._fail_envelope(
                        env,
                        RuntimeClosedError(
                            f"runtime shut down before {cell.address} handled "
                            f"{type(env.body).__name__}"
                        ),
                    )
                cell.mailbox = None
            if cell.space is not None:
                cell.space.set()
        self._ready.clear()
        for correlation, slot in list(self._pending.items()):
            slot.fill(Reply(correlation, error=RuntimeClosedError("runtime shut down")))
        self._pending.clear()

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
        self._kinds[kind] = _Kind(kind, factory, supervision or self.config.supervision, size)

    def has_kind(self, kind: str) -> bool:
        """True when ``kind`` is registered here."""
        return kind in self._kinds

    def ref(self, address: str) -> ActorRef[Any]:
        """Return a reference to the actor at ``address`` (``"kind/key"``).

        Raises:
            ValueError: the address is not ``kind/key``.
        """
        split_address(address)
        return ActorRef(self, address)

    # -- sending -----------------------------------------------------------------

    async def tell(self, address: str, message: Any) -> None:
        """Send ``message`` to ``address``, waiting while its mailbox is full."""
        self._check_open()
        envelope = Envelope(recipient=address, body=message, id=_derived_id())
        if self._inline_ok:  # in process: straight into the mailbox unless it is full
            try:
                self.transport.send_nowait(envelope)
            except MailboxFullError:
                await self.transport.send(envelope)
        else:
            await self.transport.send(envelope)
        # A producer whose sends never block would otherwise never let the
        # dispatchers run until every mailbox was full.
        self._unyielded += 1
        if self._unyielded >= self.config.throughput:
            self._unyielded = 0
            await anyio.lowlevel.checkpoint()

    def tell_nowait(self, address: str, message: Any) -> None:
        """Send ``message`` to ``address`` now, or raise :class:`MailboxFullError`."""
        self._check_open()
        self.transport.send_nowait(Envelope(recipient=address, body=message, id=_derived_id()))

    @overload
    async def ask(self, address: str, message: Command[R], timeout: float | None = None) -> R: ...
    @overload
    async def ask(self, address: str, message: object, timeout: float | None = None) -> Any: ...
    async def ask(self, address: str, message: object, timeout: float | None = None) -> Any:
        """Send ``message`` to ``address`` and return the reply (see :meth:`ActorRef.ask`).

        The reply is typed by the command's type argument for a :class:`Command`.
        """
        self._check_open()
        cell = self._cells.get(address)
        if (
            cell is not None
            and self._inline_ok
            and not cell.scheduled
            and cell.stopped is None
            and cell.actor is not None
            and cell.actor.inline_asks
        ):
            return await self._ask_inline(cell, cell.actor, message)
        limit = self.config.ask_timeout if timeout is None else timeout
        bound = self.config.max_pending_asks
        if bound and len(self._pending) >= bound:
            raise TooManyAsksError(
                address,
                f"{type(message).__name__} not sent: {len(self._pending)} asks already "
                f"wait for replies (runtime.max_pending_asks={bound})",
            )
        correlation = next(self._correlation)
        loop = asyncio.get_running_loop()
        slot = _Slot(loop.create_future())
        self._pending[correlation] = slot
        env = Envelope(
            recipient=address,
            body=message,
            correlation=correlation,
            deadline=time.time() + limit,
        )
        timer = loop.call_later(limit, _expire, slot.future)
        try:
            sent = False
            try:  # enqueue now (mailbox or outbox) unless it is full
                self.transport.send_nowait(env)
                sent = True
            except MailboxFullError:
                pass
            if not sent:
                with anyio.fail_after(limit):
                    await self.transport.send(env)
            await slot.future
        except TimeoutError:
            raise AskTimeoutError(
                address, f"no reply to {type(message).__name__} within {limit:g}s"
            ) from None
        finally:
            timer.cancel()
            self._pending.pop(correlation, None)
            future = slot.future
            if future.done() and not future.cancelled():
                # The timer may have failed it while the send still waited: mark
                # the error seen (else asyncio reports it as never retrieved).
                future.exception()
        reply = slot.reply
        assert reply is not None
        if reply.error is not None:
            raise reply.error
        return reply.value

    async def _ask_inline(self, cell: _Cell, actor: Actor, message: Any) -> Any:
        """Handle an ask to an idle local actor in the asker's task (see ``inline_asks``)."""
        cell.scheduled = True  # anything sent meanwhile queues behind this message
        try:
            return await actor.receive(message)
        except actor.expected_errors:
            self._rejected += 1
            raise
        except Exception as exc:
            await self._on_failure(cell, Envelope(recipient=cell.address, body=message), exc)
            raise self._handler_error(cell, message, exc) from exc
        finally:
            self._processed += 1
            if cell.stopped is None and cell.mailbox:
                self._ready.append(cell)
                self._wake()
            else:
                cell.scheduled = False
                if not cell.mailbox:
                    cell.mailbox = None
            self._unyielded += 1
            if self._unyielded >= self.config.throughput:
                self._unyielded = 0
                await anyio.lowlevel.checkpoint()

    @staticmethod
    def _handler_error(cell: _Cell, message: Any, exc: Exception) -> HandlerError:
        error = HandlerError(
            cell.address, f"{type(message).__name__} failed: {type(exc).__name__}: {exc}"
        )
        error.__cause__ = exc
        return error

    def _wake(self) -> None:
        idle = self._idle
        while idle:
            waiter = idle.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def pipe(
        self,
        work: Callable[[], Awaitable[Any]],
        to: str,
        wrap: Callable[[Any, BaseException | None], Any] | None = None,
    ) -> None:
        """Run ``work`` in the runtime's task group and tell its outcome to ``to``.

        See :meth:`ActorContext.pipe`.
        """
        self._check_open()
        self._tg.start_soon(self._run_pipe, work, to, wrap)

    async def _run_pipe(
        self,
        work: Callable[[], Awaitable[Any]],
        to: str,
        wrap: Callable[[Any, BaseException | None], Any] | None,
    ) -> None:
        self._pipes += 1
        try:
            result: Any = None
            error: BaseException | None = None
            try:
                result = await work()
            except Exception as exc:
                error = exc
            if wrap is not None:
                message = wrap(result, error)
            elif error is not None:
                log.error("pipe_failed", to=to, exc_info=error)
                return
            else:
                message = result
            if message is not None:
                try:
                    await self.tell(to, message)
                except (ActorError, RuntimeClosedError) as exc:
                    log.warning("pipe_undelivered", to=to, reason=str(exc))
        finally:
            self._pipes -= 1

    # -- the transport's host side ------------------------------------------------

    def _cell(self, address: str) -> _Cell:
        cell = self._cells.get(address)
        if cell is None:
            kind_name = address.partition("/")[0]
            kind = self._kinds.get(kind_name)
            if kind is None:
                raise ActorNotFoundError(address, f"no actor kind {kind_name!r} is registered")
            split_address(address)
            cell = self._cells[address] = _Cell(address, kind)
        return cell

    def deliver_nowait(self, envelope: Envelope) -> None:
        """Put ``envelope`` into its local mailbox, or raise :class:`MailboxFullError`."""
        cell = self._cells.get(envelope.recipient) or self._cell(envelope.recipient)
        if cell.stopped is not None:
            raise ActorStoppedError(cell.address, cell.stopped)
        mailbox = cell.mailbox
        if mailbox is None:
            mailbox = cell.mailbox = deque()
        elif len(mailbox) >= cell.kind.mailbox_size:
            raise MailboxFullError(
                cell.address, f"mailbox full ({cell.kind.mailbox_size} messages waiting)"
            )
        mailbox.append(envelope)
        if not cell.scheduled:
            cell.scheduled = True
            self._ready.append(cell)
            self._wake()

    async def deliver(self, envelope: Envelope) -> None:
        """Put ``envelope`` into its local mailbox, waiting while the mailbox is full."""
        while True:
            cell = self._cells.get(envelope.recipient) or self._cell(envelope.recipient)
            mailbox = cell.mailbox
            if mailbox is None or len(mailbox) < cell.kind.mailbox_size or cell.stopped:
                self.deliver_nowait(envelope)
                return
            if cell.space is None:
                cell.space = anyio.Event()
            await cell.space.wait()

    def resolve(self, reply: Reply) -> None:
        """Hand ``reply`` to the ask waiting for it; a late reply is dropped."""
        slot = self._pending.pop(reply.correlation, None)
        if slot is None:
            log.debug("reply_dropped", correlation=reply.correlation)
            return
        slot.fill(reply)

    async def _send_reply(self, env: Envelope, reply: Reply) -> None:
        if env.reply_to is None:
            self.resolve(reply)
        else:
            await self.transport.reply(env, reply)

    def _fail_envelope(self, env: Envelope, error: BaseException) -> None:
        if self._hooked:
            self.transport.dropped(env)
        if env.correlation is None:
            return
        if env.reply_to is None:
            self.resolve(Reply(env.correlation, error=error))
        else:
            self._tg_or_none_reply(env, Reply(env.correlation, error=error))

    def _tg_or_none_reply(self, env: Envelope, reply: Reply) -> None:
        tg = self._tg
        if tg is not None:
            tg.start_soon(self.transport.reply, env, reply)

    # -- dispatching -----------------------------------------------------------------

    async def _dispatch_loop(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        task_status.started()
        loop = asyncio.get_running_loop()
        ready = self._ready
        throughput = self.config.throughput
        since_yield = 0
        while True:
            if not ready:
                since_yield = 0
                waiter = loop.create_future()
                self._idle.append(waiter)
                await waiter
                continue
            cell = ready.popleft()
            self._busy += 1
            try:
                since_yield += await self._run_cell(cell)
            finally:
                self._busy -= 1
            if since_yield >= throughput:
                # Handlers that never suspend would otherwise starve every other task.
                since_yield = 0
                await anyio.lowlevel.checkpoint()

    async def _run_cell(self, cell: _Cell) -> int:
        """Run up to ``throughput`` messages of one actor; return how many ran."""
        handled = 0
        actor = cell.actor
        mailbox = cell.mailbox
        limit = self.config.throughput
        shed = self.config.shed_expired_asks
        while mailbox and handled < limit and cell.stopped is None:
            if actor is None:
                actor = await self._activate(cell, mailbox[0])
                if actor is None:
                    break
            env = mailbox.popleft()
            space = cell.space
            if space is not None:
                cell.space = None
                space.set()
            handled += 1
            if env.deadline is not None and shed and env.deadline < time.time():
                # Nobody waits for this reply any more: skip the work, but let the
                # transport settle the command as done (over Redis: acked).
                self._expired += 1
                if self._hooked and not await self.transport.handled(env, actor, True):
                    actor = cell.actor = None
                continue
            try:
                if env.track_start:
                    await self.transport.starting(env)
                if env.id:
                    value = await _receive_as_command(actor, env)
                else:
                    value = await actor.receive(env.body)
            except actor.expected_errors as exc:
                self._rejected += 1
                if self._hooked and not await self.transport.handled(env, actor, True):
                    actor = cell.actor = None
                    continue
                if env.correlation is not None:
                    await self._send_reply(env, Reply(env.correlation, error=exc))
                else:
                    log.warning(
                        "actor_rejected_message",
                        actor=cell.address,
                        message=type(env.body).__name__,
                        reason=str(exc),
                    )
                continue
            except Exception as exc:
                keep = not self._hooked or await self.transport.handled(env, actor, False)
                again = self._hooked and await self.transport.retry(
                    env, self._restarts_left(cell) >= 2
                )
                await self._on_failure(cell, env, exc, answer=not again)
                if not keep:
                    cell.actor = None
                actor = cell.actor
                if again:
                    # Before the actor's other mail. The failure could not stop the
                    # actor: a retry is asked for only while the restart budget lasts.
                    mailbox.appendleft(env)
                continue
            if self._hooked and not await self.transport.handled(env, actor, True):
                actor = cell.actor = None
                continue
            if env.correlation is not None:
                await self._send_reply(env, Reply(env.correlation, value))
        self._processed += handled
        if cell.stopped is None and cell.mailbox:
            self._ready.append(cell)
        else:
            cell.scheduled = False
            if not cell.mailbox:
                cell.mailbox = None
        return handled

    async def _activate(self, cell: _Cell, first: Envelope) -> Actor | None:
        """Make the actor from its kind and start it; a failure counts as a crash."""
        try:
            actor = cell.kind.factory(ActorContext(self, cell.address))
            if self._hooked:
                await self.transport.activated(cell.address, actor)
            await actor.on_start()
        except Exception as exc:
            assert cell.mailbox is not None
            cell.mailbox.popleft()
            if self._hooked:
                self.transport.dropped(first)
            await self._on_failure(cell, first, exc)
            return None
        cell.actor = actor
        return actor

    async def _on_failure(
        self, cell: _Cell, env: Envelope, exc: Exception, *, answer: bool = True
    ) -> None:
        """Supervision: log, answer the asker (unless ``answer`` is False: the envelope
        is delivered again), then resume, reset or stop the actor."""
        self._failures += 1
        body = type(env.body).__name__
        log.error(
            "actor_handler_failed",
            actor=cell.address,
            message=body,
            msg_id=env.id or None,
            exc_info=exc,
        )
        if answer and env.correlation is not None:
            error = self._handler_error(cell, env.body, exc)
            await self._send_reply(env, Reply(env.correlation, error=error))
        policy = cell.kind.supervision
        now = time.monotonic()
        restarts = cell.restarts
        if restarts is None:
            restarts = cell.restarts = deque()
        while restarts and restarts[0] <= now - policy.within_seconds:
            restarts.popleft()
        if policy.strategy == "stop":
            await self._stop_cell(cell, f"stopped after a failure in {body} (strategy 'stop')")
            return
        if len(restarts) >= policy.max_restarts:
            await self._stop_cell(
                cell,
                f"stopped: more than {policy.max_restarts} restarts within "
                f"{policy.within_seconds:g}s (last failure: {type(exc).__name__}: {exc})",
            )
            return
        restarts.append(now)
        self._restarts += 1
        if policy.strategy == "reset" and cell.actor is not None:
            old, cell.actor = cell.actor, None
            if type(old).on_stop is not Actor.on_stop:
                await self._call_stop_hook(cell, old)
        log.warning("actor_restarted", strategy=policy.strategy, restarts_in_period=len(restarts))

    def _restarts_left(self, cell: _Cell) -> int:
        """Failures the actor may still have before the next one stops it (plus one)."""
        policy = cell.kind.supervision
        if policy.strategy == "stop":
            return 0
        cutoff = time.monotonic() - policy.within_seconds
        recent = sum(1 for t in cell.restarts or () if t > cutoff)
        return policy.max_restarts - recent

    async def _stop_cell(self, cell: _Cell, reason: str) -> None:
        cell.stopped = reason
        actor, cell.actor = cell.actor, None
        if actor is not None and type(actor).on_stop is not Actor.on_stop:
            await self._call_stop_hook(cell, actor)
        pending, cell.mailbox = cell.mailbox, None
        for env in pending or ():
            self._fail_envelope(env, ActorStoppedError(cell.address, reason))
        if cell.space is not None:
            cell.space.set()
            cell.space = None
        log.error("actor_stopped", actor=cell.address, reason=reason)

    async def passivate(self, address: str) -> bool:
        """Drop the idle actor at ``address`` from memory (a virtual actor's state
        is stored by its transport; the next message activates it again).

        Returns:
            True if it was dropped (or was not here); False if it has mail or is running.
        """
        cell = self._cells.get(address)
        if cell is None:
            return True
        if cell.scheduled or cell.mailbox or cell.stopped is not None:
            return False
        del self._cells[address]
        actor, cell.actor = cell.actor, None
        if actor is not None and type(actor).on_stop is not Actor.on_stop:
            await self._call_stop_hook(cell, actor)
        return True

    def spawn(self, func: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run ``func(*args)`` as a task of the runtime's task group.

        For a transport's background loops: they end when the runtime closes
        (after the mailboxes drained, before the transport's ``aclose``). An
        exception escaping ``func`` crashes the runtime, so loops handle their own.
        """
        if self._tg is None:
            raise RuntimeClosedError("the runtime is not open")
        self._tg.start_soon(func, *args)

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
        return self._processed

    def stats(self) -> RuntimeStats:
        """Return a snapshot of the counters: it walks every actor once (at 100,000
        actors a few ms), so poll it for a progress display, not in a tight loop; to
        wait for work to finish, poll :attr:`processed`."""
        depth = 0
        deepest = 0
        active = 0
        stopped = 0
        for cell in self._cells.values():
            if cell.mailbox:
                n = len(cell.mailbox)
                depth += n
                deepest = max(deepest, n)
            if cell.actor is not None:
                active += 1
            if cell.stopped is not None:
                stopped += 1
        return RuntimeStats(
            actors=len(self._cells),
            active=active,
            stopped=stopped,
            processed=self._processed,
            failures=self._failures,
            rejected=self._rejected,
            restarts=self._restarts,
            mailbox_depth=depth,
            max_mailbox_depth=deepest,
            pending_asks=len(self._pending),
            expired=self._expired,
        )

    def stop_reason(self, address: str) -> str | None:
        """Why the actor at ``address`` stopped, or None if it has not."""
        cell = self._cells.get(address)
        return cell.stopped if cell is not None else None
