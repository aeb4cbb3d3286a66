"""Dispatching: the tasks that run actors' handlers, a cell's turn at a time.

How it runs (docs/architecture.md, "Cheap actors"): a few dispatcher tasks take
cells with mail from the ready queue (``_mailboxes``) and run up to
``throughput`` messages of each, one at a time. So an idle actor is a small
object, not a parked task, and one actor never runs two messages at once. A
handler's tells get ids derived from its command's (``_handling``).

A message that cannot reach an actor for a reason of its own (an address that is
not ``kind/key``, a kind not registered, a factory that refuses the address, an
actor stopped and in its back-off) is *refused*: its asker gets the error, the
transport hears of it (``Transport.undeliverable``: over Redis the entry is
dead-lettered with the reason), and nothing counts against any actor.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, cast

import anyio
import anyio.abc
import structlog

from actormem.runtime._actor import Actor, ActorContext, Forward
from actormem.runtime._cell import Cell, Kind
from actormem.runtime._envelope import Envelope, Reply
from actormem.runtime._handling import Origin, handling
from actormem.runtime._mailboxes import SPARE_MAILBOXES, Mailboxes
from actormem.runtime._supervision import Stopped, Supervisor, handler_error
from actormem.runtime.errors import ActorError, ActorNotFoundError

if TYPE_CHECKING:
    from actormem.runtime._asks import Asks
    from actormem.runtime._runtime import Runtime
    from actormem.runtime.metrics import Metrics

__all__ = ("Dispatcher",)

log = structlog.get_logger("actormem.runtime")


class Dispatcher(Mailboxes):
    """The cells of one runtime (see :class:`Mailboxes`) and the dispatcher tasks
    that run them.

    Args:
        runtime: the runtime the actors live in (their context's).
        kinds: the runtime's registered kinds, by name.
        asks: where replies go.
        supervisor: what happens when a handler crashes.
        hooked: the transport takes the per-message hooks (``handled``, ``retry``...).

    Attributes:
        busy: dispatchers awake (running cells, or yielding between them), not
            waiting for a cell with mail.
        processed: messages taken from mailboxes (handled or shed).
        rejected: messages answered with an expected error, or refused.
        expired: asks dropped unhandled because their deadline had passed.
        metrics: records each message handled (None: metrics are off).
    """

    __slots__ = (
        "_hooked",
        "_runtime",
        "_supervisor",
        "busy",
        "expired",
        "metrics",
        "processed",
        "rejected",
    )

    def __init__(
        self,
        runtime: Runtime,
        kinds: dict[str, Kind],
        asks: Asks,
        supervisor: Supervisor,
        *,
        hooked: bool,
    ) -> None:
        super().__init__(kinds, asks)
        self._runtime = runtime
        self._supervisor = supervisor
        self._hooked = hooked
        self.busy = 0
        self.processed = 0
        self.rejected = 0
        self.expired = 0
        self.metrics: Metrics | None = None

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """One dispatcher task: run cells from the ready queue until cancelled, up to
        ``throughput`` messages of each per turn.

        A cell's turn runs here, in the task's own loop rather than in a coroutine
        of its own: most turns hold one message, so the turn's setup is the cost.
        """
        task_status.started()
        loop = asyncio.get_running_loop()
        ready = self.ready
        idle = self._idle
        runtime = self._runtime
        config = runtime.config
        transport = runtime.transport
        hooked = self._hooked
        limit = config.throughput
        shed = config.shed_expired_asks
        metrics = self.metrics
        spare = self._spare
        # The transport's stage tracer, if it has one on (``trace`` is None otherwise).
        trace = getattr(transport, "trace", None)
        started = 0.0
        since_yield = 0
        running = self._running
        me = asyncio.current_task()
        assert me is not None
        running[me] = None
        self.busy += 1  # counted while awake: from here until it waits for a cell
        try:
            while True:
                if not ready:
                    since_yield = 0
                    waiter = loop.create_future()
                    idle.append(waiter)
                    self.busy -= 1
                    try:
                        await waiter
                    finally:
                        self.busy += 1
                        if waiter.done() and not waiter.cancelled():
                            self._waking -= 1
                    continue
                cell = ready.popleft()
                if ready and idle and not self._waking:
                    self._wake()  # the next dispatcher, for the cells left
                actor = cell.actor
                mailbox = cell.mailbox
                handled = 0
                running[me] = cell  # what its handlers send to full mailboxes mutes it
                while mailbox and handled < limit and cell.stopped is None and cell.muted is None:
                    if actor is None:
                        actor = await self._activate(cell, mailbox[0])
                        if actor is None or not mailbox:
                            break  # refused, failed, or discarded while it started
                    env = mailbox.popleft()
                    space = cell.space
                    if space is not None:
                        cell.space = None
                        space.set()
                    if cell.muting is not None and len(mailbox) < cell.kind.mailbox_size:
                        self.release(cell)
                    handled += 1
                    if hooked:  # batches are for transports that take the hooks
                        if cell.single:
                            cell.single -= 1
                        elif mailbox and self._batchable(env) and self._batchable(mailbox[0]):
                            run = [env]
                            while mailbox and handled < limit and self._batchable(mailbox[0]):
                                run.append(mailbox.popleft())
                                handled += 1
                            if cell.muting is not None and len(mailbox) < cell.kind.mailbox_size:
                                self.release(cell)
                            actor = await self._run_batch(cell, actor, run)
                            continue
                    if env.deadline is not None and shed and env.deadline < time.time():
                        # Nobody waits for this reply any more: skip the work, but let the
                        # transport settle the command as done (over Redis: acked).
                        self.expired += 1
                        if hooked and not await transport.handled(env, actor, True):
                            actor = cell.actor = None
                        continue
                    ctx = actor.ctx
                    ctx.sender = env.sender
                    ctx.asked = env.correlation is not None
                    if metrics is not None:
                        started = time.perf_counter()
                    origin = None
                    if trace is not None:
                        trace.started(env)
                    try:
                        if env.track_start:
                            await transport.starting(env)
                        if env.id:
                            # Its tells are numbered after its id (see ``_handling``).
                            origin = Origin(env)
                            token = handling.set(origin)
                            try:
                                value = await actor.receive(env.body)
                            finally:
                                handling.reset(token)
                        else:
                            value = await actor.receive(env.body)
                    except actor.expected_errors as exc:
                        self.rejected += 1
                        if metrics is not None:
                            metrics.handled(
                                cell.kind.name, env.body, time.perf_counter() - started, 1
                            )
                        if hooked and not await transport.handled(env, actor, True):
                            actor = cell.actor = None
                            continue
                        await self._answer_error(env, exc, "actor_rejected_message")
                        continue
                    except Exception as exc:
                        if metrics is not None:
                            metrics.handled(
                                cell.kind.name, env.body, time.perf_counter() - started, 2
                            )
                        keep = not hooked or await transport.handled(env, actor, False)
                        again = hooked and await transport.retry(
                            env, self._supervisor.restarts_left(cell) >= 2
                        )
                        await self._failed(cell, env, exc, answer=not again)
                        if not keep:
                            cell.actor = None
                        actor = cell.actor
                        if again:
                            # Before the actor's other mail. The failure could not stop the
                            # actor: a retry is asked for only while the restart budget lasts.
                            mailbox.appendleft(env)
                        continue
                    if metrics is not None:
                        metrics.handled(cell.kind.name, env.body, time.perf_counter() - started, 0)
                    if trace is not None:
                        trace.handled(env)
                    if type(value) is Forward:
                        if not await self._forwarded(cell, actor, env, value, origin):
                            actor = None
                    elif hooked and not await transport.handled(env, actor, True):
                        actor = cell.actor = None
                    elif env.correlation is not None:
                        await self._asks.send_reply(env, Reply(env.correlation, value))
                self.processed += handled
                running[me] = None
                if cell.stopped is None and cell.mailbox:
                    if cell.muted is None:
                        ready.append(cell)
                    else:  # stays scheduled, out of the ready queue, until released
                        cell.parked = True
                else:
                    # _unschedule(), inline: at 1,000 agents nearly every turn ends here.
                    cell.muted = None
                    cell.scheduled = False
                    left = cell.mailbox
                    if left is not None and not left:
                        cell.mailbox = None
                        if len(spare) < SPARE_MAILBOXES:
                            spare.append(left)
                since_yield += handled
                if since_yield >= limit and ready:
                    # Handlers that never suspend would otherwise starve every other task
                    # (with nothing ready, waiting for a cell gives the turn up instead).
                    # asyncio.sleep(0), not anyio's checkpoint: see
                    # Runtime._yield_now_and_then.
                    since_yield = 0
                    await asyncio.sleep(0)
        finally:
            self.busy -= 1
            running.pop(me, None)

    async def _forwarded(
        self, cell: Cell, actor: Actor, env: Envelope, forward: Forward, origin: Origin | None
    ) -> bool:
        """Send on the message a handler forwarded, settle ``env`` with the transport,
        and tell the asker if the forward failed.

        Returns:
            False when the transport dropped the actor (``cell.actor`` is None then).
        """
        # Sent before the command is settled, as its tells are, so a transport that
        # stores effects keeps it with the command's commit.
        failed = await self._forward(cell.address, env, forward, origin)
        if self._hooked and not await self._runtime.transport.handled(env, actor, True):
            cell.actor = None
            return False
        if failed is not None:
            await self._forward_failed(cell.address, env, forward, failed)
        return True

    def _batchable(self, env: Envelope) -> bool:
        """Whether ``env`` may join a batch (see :meth:`_run_batch`): a command whose
        type allows it (``Command.batch``), whose transport allows it, and that is
        not an ask its asker gave up on (shed on its own)."""
        return (
            getattr(type(env.body), "batch", False)
            and bool(env.id)
            and (env.deadline is None or env.deadline >= time.time())
            and self._runtime.transport.batchable(env)
        )

    async def _run_batch(self, cell: Cell, actor: Actor, run: list[Envelope]) -> Actor | None:
        """Handle ``run``, consecutive commands of one actor, as a batch: each in turn
        (its start reported to the transport first when it tracks starts), then their
        effects settled together (``Transport.handled_batch``: over Redis one change
        set, one entry of the group commit), then each answered in order.

        A command refused as bad input (an expected error) is answered with its error
        and changes nothing; the others go on. A command that crashes leaves the
        actor's memory holding the batch's earlier changes, not yet taken, and
        whatever it left half done: the actor is dropped and the whole run goes back
        to the front of the mailbox, to be handled one command at a time by a fresh
        activation (the crash then counts, and is supervised, as any other).

        Returns:
            The actor, or None when it was dropped.
        """
        transport = self._runtime.transport
        metrics = self.metrics
        kind = cell.kind.name
        trace = getattr(transport, "trace", None)
        started = 0.0
        # Per command: what its handler returned, the error to answer it with, and
        # whether that error is a failed forward (else an expected error).
        outcomes: list[tuple[Any, BaseException | None, bool]] = []
        for env in run:
            actor.ctx.sender = env.sender
            actor.ctx.asked = env.correlation is not None
            if metrics is not None:
                started = time.perf_counter()
            origin = Origin(env)
            if trace is not None:
                trace.started(env)
            try:
                if env.track_start:
                    await transport.starting(env)
                # Its tells are numbered after its id (see ``_handling``).
                token = handling.set(origin)
                try:
                    value = await actor.receive(env.body)
                finally:
                    handling.reset(token)
            except actor.expected_errors as exc:
                self.rejected += 1
                if metrics is not None:
                    metrics.handled(kind, env.body, time.perf_counter() - started, 1)
                outcomes.append((None, exc, False))
                continue
            except Exception as exc:
                log.warning(
                    "batch_handled_again",
                    actor=cell.address,
                    commands=len(run),
                    message=type(env.body).__name__,
                    reason=f"{type(exc).__name__}: {exc}",
                )
                self._again(cell, run)
                return None
            if metrics is not None:
                metrics.handled(kind, env.body, time.perf_counter() - started, 0)
            if trace is not None:
                trace.handled(env)
            failed = None
            if type(value) is Forward:
                failed = await self._forward(cell.address, env, value, origin)
            outcomes.append((value, failed, True))
        stored = await transport.handled_batch(run, actor)
        if stored is None:
            log.info("batch_handled_again", actor=cell.address, commands=len(run))
            self._again(cell, run)
            return None
        if not stored:
            cell.actor = None
            return None
        for env, (value, error, forwarded) in zip(run, outcomes, strict=True):
            if error is not None and not forwarded:
                await self._answer_error(env, error, "actor_rejected_message")
            elif error is not None:
                await self._forward_failed(cell.address, env, value, cast(Exception, error))
            elif type(value) is not Forward and env.correlation is not None:
                await self._asks.send_reply(env, Reply(env.correlation, value))
        return actor

    def _again(self, cell: Cell, run: list[Envelope]) -> None:
        """Drop the actor and put ``run`` back at the front of its mailbox, to be
        handled one command at a time (and counted as processed then). A cell
        discarded meanwhile (its shard lost, say) takes nothing back: the transport
        lets go of the run, as of the rest of that cell's mail."""
        transport = self._runtime.transport
        self.processed -= len(run)
        cell.actor = None
        if self.cells.get(cell.address) is not cell or cell.mailbox is None:
            for env in run:
                transport.dropped(env)
            return
        for env in run:
            transport.again(env)
        cell.mailbox.extendleft(reversed(run))
        cell.single = len(run)

    async def _forward(
        self, address: str, env: Envelope, forward: Forward, origin: Origin | None
    ) -> Exception | None:
        """Send ``forward``'s message on as ``address``, answered straight to ``env``'s
        asker; return why it could not be sent, if it could not.

        Its id is derived from ``env``'s, so a command delivered again forwards the
        same id and the recipient skips the copy.
        """
        onward = Envelope(
            recipient=forward.address,
            body=forward.message,
            id=f"{env.id}.fwd" if env.id else "",
            sender=address,
            reply_to=env.reply_to,
            correlation=env.correlation,
            deadline=env.deadline,
        )
        token = None
        if origin is not None:
            origin.mark = onward.id
            token = handling.set(origin)
        try:
            await self._runtime.transport.send(onward)
        except Exception as exc:  # the asker hears why; nothing else may stop a dispatcher
            return exc
        finally:
            if token is not None:
                handling.reset(token)
        return None

    async def _forward_failed(
        self, address: str, env: Envelope, forward: Forward, exc: Exception
    ) -> None:
        """Tell ``env``'s asker why its command could not be forwarded (log it for a tell)."""
        if env.correlation is None:
            log.warning("forward_failed", actor=address, to=forward.address, reason=str(exc))
        else:
            await self._asks.send_reply(env, Reply(env.correlation, error=exc))

    async def _activate(self, cell: Cell, first: Envelope) -> Actor | None:
        """Make the actor from its kind and start it. A factory that raises refuses
        the address (the message is refused, nothing counts against an actor); a
        failure to load or start the actor counts as a crash."""
        transport = self._runtime.transport
        assert cell.mailbox is not None
        try:
            actor = cell.kind.factory(ActorContext(self._runtime, cell.address))
        except Exception as exc:
            cell.mailbox.popleft()
            error = ActorNotFoundError(
                cell.address,
                f"the factory of kind {cell.kind.name!r} refused the address: "
                f"{type(exc).__name__}: {exc}",
            )
            await self.refuse(first, error)
            return None
        try:
            if self._hooked:
                await transport.activated(cell.address, actor)
            await actor.on_start()
        except Exception as exc:
            mailbox = cell.mailbox
            if not mailbox or mailbox[0] is not first:
                # Discarded while it started: its mail went with it (the transport
                # delivers it again), and the failure is no longer this cell's.
                log.info("actor_start_failed_after_discard", actor=cell.address, error=repr(exc))
                return None
            mailbox.popleft()
            if self._hooked:
                transport.dropped(first)
            await self._failed(cell, first, exc)
            return None
        cell.actor = actor
        return actor

    async def _failed(
        self, cell: Cell, env: Envelope, exc: Exception, *, answer: bool = True
    ) -> None:
        """A handler (or start) crashed: supervise, and retire the cell if that stopped it."""
        await self._supervisor.on_failure(cell, env, exc, answer=answer)
        if cell.stopped is not None:
            await self._retire(cell, cell.stopped)

    async def _retire(self, cell: Cell, reason: str) -> None:
        """Drop a stopped actor's cell for its back-off and refuse its mail."""
        address = cell.address
        if self.cells.get(address) is cell:
            del self.cells[address]
        backoff = cell.kind.supervision.backoff_seconds
        stopped = self.stopped[address] = Stopped(reason, time.monotonic() + backoff)
        pending, cell.mailbox = cell.mailbox, None
        if cell.space is not None:
            cell.space.set()
            cell.space = None
        self.release(cell)
        while pending:
            await self.refuse(pending.popleft(), stopped.refusal(address))

    async def refuse(self, env: Envelope, error: ActorError) -> None:
        """Give ``env`` up for a reason of its own: answer its asker with ``error``,
        and let the transport record it (over Redis: dead-lettered)."""
        self.rejected += 1
        if self._hooked:
            await self._runtime.transport.undeliverable(env, error)
        await self._answer_error(env, error, "message_refused")

    async def _answer_error(self, env: Envelope, error: BaseException, event: str) -> None:
        """Fail the ask ``env`` with ``error``; for a tell, nobody waits: log ``event``."""
        if env.correlation is not None:
            await self._asks.send_reply(env, Reply(env.correlation, error=error))
        else:
            log.warning(
                event, actor=env.recipient, message=type(env.body).__name__, reason=str(error)
            )

    async def run_inline(self, cell: Cell, actor: Actor, message: object) -> Any:
        """Handle an ask to an idle local actor in the asker's task (see
        ``Actor.inline_asks``); mail that arrives meanwhile queues behind it."""
        cell.scheduled = True
        actor.ctx.sender = None
        actor.ctx.asked = True
        metrics = self.metrics
        started = 0.0 if metrics is None else time.perf_counter()
        try:
            value = await actor.receive(message)
        except actor.expected_errors:
            self.rejected += 1
            if metrics is not None:
                metrics.handled(cell.kind.name, message, time.perf_counter() - started, 1)
            raise
        except Exception as exc:
            if metrics is not None:
                metrics.handled(cell.kind.name, message, time.perf_counter() - started, 2)
            await self._failed(cell, Envelope(recipient=cell.address, body=message), exc)
            raise handler_error(cell.address, message, exc) from exc
        else:
            if metrics is not None:
                metrics.handled(cell.kind.name, message, time.perf_counter() - started, 0)
            return value
        finally:
            self.processed += 1
            if cell.mailbox is None:  # no mail came meanwhile: the usual case
                cell.scheduled = False
            elif cell.stopped is None and cell.mailbox:
                self.ready.append(cell)
                self._wake()
            else:
                self._unschedule(cell)
