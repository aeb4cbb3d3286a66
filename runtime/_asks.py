"""Asks: the replies this runtime waits for, and the way a reply goes back to its asker.

An ask sends an envelope with a correlation number and waits on a slot; the reply
fills the slot, wherever it came from: this runtime's dispatchers (a local actor)
or a transport (an actor in another process). Every ask ends: with the reply, the
error the handler raised, :class:`AskTimeoutError`, or :class:`RuntimeClosedError`
at shutdown.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import time
from collections import deque
from typing import Any

import anyio
import anyio.abc
import structlog

from actormem.runtime._envelope import Envelope, Reply
from actormem.runtime.config import RuntimeConfig
from actormem.runtime.errors import (
    ActormemError,
    AskTimeoutError,
    MailboxFullError,
    RuntimeClosedError,
    TooManyAsksError,
)
from actormem.runtime.transports.base import Transport

__all__ = ("Asks",)

log = structlog.get_logger("actormem.runtime")


class _Slot:
    """Where an ask's reply lands: an asyncio future (cheaper than an anyio Event
    and a cancel scope per ask; redis-py ties the runtime to asyncio anyway)."""

    __slots__ = ("deadline", "envelope", "future", "reply", "sends")

    def __init__(self, future: asyncio.Future[None]) -> None:
        self.future = future
        self.reply: Reply | None = None
        #: Times the ask was sent (resends included).
        self.sends = 0
        #: The ask's envelope, and when its asker stops waiting (for resends).
        self.envelope: Envelope | None = None
        self.deadline = 0.0

    def fill(self, reply: Reply) -> None:
        self.reply = reply
        if not self.future.done():
            self.future.set_result(None)


def _expire(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_exception(TimeoutError())


class Asks:
    """The asks waiting for replies in one runtime.

    Args:
        config: the runtime's config (``ask_timeout``, ``max_pending_asks``).
        transport: carries the asks out and remote replies back.
        hooked: the transport takes the per-message hooks (``dropped``).

    An ask over a transport that can lose a reply is sent again, unchanged, every
    ``transport.resend_after()`` seconds until its reply or its deadline: the same
    command id, so the copy is never applied twice, and the same correlation, so
    whichever reply comes first answers it. One task watches when the asks are due
    for it (a queue in the order they were sent: the delay is the same for all),
    rather than a timer and a wait per ask.

    Attributes:
        pending: the slots of the asks waiting, by correlation number.
        tg: the runtime's task group while it is open (replies sent in the background).
    """

    __slots__ = (
        "_config",
        "_correlation",
        "_due",
        "_hooked",
        "_transport",
        "_wakeup",
        "pending",
        "resent",
        "tg",
    )

    def __init__(self, config: RuntimeConfig, transport: Transport, hooked: bool) -> None:
        self._config = config
        self._transport = transport
        self._hooked = hooked
        # A random start: a process restarted under the same name (and reply stream)
        # never takes a late reply to its predecessor's ask for one of its own.
        self._correlation = itertools.count(secrets.randbits(48) + 1)
        self.pending: dict[int, _Slot] = {}
        #: Asks sent again because no reply came in time (see ``Transport.resend_after``).
        self.resent = 0
        self.tg: anyio.abc.TaskGroup | None = None
        # When each ask sent is due to be sent again, and its correlation, oldest first;
        # None while no task watches them. Two queues of numbers, not one of pairs: an
        # entry outlives its ask until the resender reaches it (up to ``every`` s), and
        # the collector tracks a pair (a tuple), not a number, so pairs alive in their
        # thousands would count towards its young collections.
        self._due: tuple[deque[float], deque[int]] | None = None
        self._wakeup: asyncio.Future[None] | None = None

    async def ask(
        self, address: str, message: object, timeout: float | None, sender: str | None = None
    ) -> Any:
        """Send ``message`` to ``address`` through the transport and wait for the reply
        (sending it again, unchanged, while none comes, if the transport asks for it;
        ``sender``: the actor it is sent as, if any).

        Raises:
            TooManyAsksError: ``max_pending_asks`` asks already wait; nothing was sent.
            AskTimeoutError: no reply within ``timeout`` (the config's by default).
            The error of the reply, if it carries one.
        """
        config = self._config
        limit = config.ask_timeout if timeout is None else timeout
        bound = config.max_pending_asks
        pending = self.pending
        if bound and len(pending) >= bound:
            raise TooManyAsksError(
                address,
                f"{type(message).__name__} not sent: {len(pending)} asks already "
                f"wait for replies (runtime.max_pending_asks={bound})",
            )
        correlation = next(self._correlation)
        loop = asyncio.get_running_loop()
        slot = _Slot(loop.create_future())
        pending[correlation] = slot
        deadline = time.time() + limit
        env = Envelope(
            recipient=address,
            body=message,
            correlation=correlation,
            deadline=deadline,
            sender=sender,
        )
        timer = loop.call_later(limit, _expire, slot.future)
        try:
            sent = False
            try:  # enqueue now (mailbox or outbox) unless it is full
                self._transport.send_nowait(env)
                sent = True
            except MailboxFullError:
                pass
            if not sent:
                with anyio.fail_after(limit):
                    await self._transport.send(env)
            slot.sends = 1
            resend = self._transport.resend_after()
            if resend is not None:
                self._watch(correlation, slot, env, deadline, resend)
            await slot.future
        except TimeoutError:
            times = f" (sent {slot.sends} times)" if slot.sends > 1 else ""
            raise AskTimeoutError(
                address, f"no reply to {type(message).__name__} within {limit:g}s{times}"
            ) from None
        finally:
            timer.cancel()
            pending.pop(correlation, None)
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

    def _watch(
        self, correlation: int, slot: _Slot, env: Envelope, deadline: float, every: float
    ) -> None:
        """Have the ask sent again if no reply came within ``every`` seconds (see
        :meth:`_resender`); nothing is resent while the runtime is not open."""
        tg = self.tg
        if tg is None:
            return
        slot.envelope, slot.deadline = env, deadline
        due = self._due
        if due is None:
            due = self._due = (deque(), deque())
            # A task of the runtime's group, not a timer callback: a callback runs
            # outside any task, where anyio cannot tell which event loop runs it
            # (under plain asyncio.run, or in a coroutine sent from another thread).
            tg.start_soon(self._resender, due, every)
        times, correlations = due
        times.append(time.monotonic() + every)
        correlations.append(correlation)
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)

    async def _resender(self, due: tuple[deque[float], deque[int]], every: float) -> None:
        """Start resending each ask whose reply has not come when it is due (see
        :meth:`_resend`), for as long as the runtime is open."""
        loop = asyncio.get_running_loop()
        times, correlations = due
        try:
            while True:
                while correlations:
                    slot = self.pending.get(correlations[0])
                    if slot is None or slot.future.done():
                        times.popleft()
                        correlations.popleft()
                        continue
                    wait = times[0] - time.monotonic()
                    if wait > 0:
                        await anyio.sleep(wait)
                        continue
                    times.popleft()
                    correlations.popleft()
                    env = slot.envelope
                    if env is not None and self.tg is not None:
                        self.tg.start_soon(self._resend, env, slot, every, slot.deadline)
                self._wakeup = loop.create_future()
                await self._wakeup
        finally:
            self._due = self._wakeup = None

    async def _resend(self, env: Envelope, slot: _Slot, every: float, deadline: float) -> None:
        """Send ``env`` again every ``every`` seconds until its reply or its deadline: a
        reply lost with the worker that applied the command comes again from the copy
        (kept with its effect)."""
        with anyio.move_on_after(max(deadline - time.time(), 0.0)):
            while not slot.future.done():
                try:
                    await self._transport.resend(env)
                except ActormemError as exc:  # closing, or Redis away: the timeout decides
                    log.debug("ask_not_resent", to=env.recipient, reason=str(exc))
                    return
                slot.sends += 1
                self.resent += 1
                await asyncio.wait((slot.future,), timeout=every)

    def resolve(self, reply: Reply) -> None:
        """Hand ``reply`` to the ask waiting for it; a late reply is dropped."""
        slot = self.pending.pop(reply.correlation, None)
        if slot is None:
            log.debug("reply_dropped", correlation=reply.correlation)
            return
        slot.fill(reply)

    async def send_reply(self, env: Envelope, reply: Reply) -> None:
        """Answer the ask ``env``: here if it was asked here, else through the transport."""
        if env.reply_to is None:
            self.resolve(reply)
        else:
            await self._transport.reply(env, reply)

    def fail_envelope(self, env: Envelope, error: BaseException) -> None:
        """Give ``env`` up unhandled: tell the transport, and fail its ask with ``error``."""
        if self._hooked:
            self._transport.dropped(env)
        if env.correlation is None:
            return
        reply = Reply(env.correlation, error=error)
        if env.reply_to is None:
            self.resolve(reply)
        elif self.tg is not None:
            self.tg.start_soon(self._transport.reply, env, reply)

    def close(self) -> None:
        """Fail every ask still waiting with :class:`RuntimeClosedError` (shutdown)."""
        for correlation, slot in list(self.pending.items()):
            slot.fill(Reply(correlation, error=RuntimeClosedError("runtime shut down")))
        self.pending.clear()
