"""Supervision: what happens to an actor whose handler raised an unexpected exception.

The asker gets a :class:`HandlerError`; then the kind's policy resumes the actor
(state kept), resets it (a fresh one on the next message) or stops it. More than
``max_restarts`` failures within ``within_seconds`` stop it too (OTP's restart
intensity). A stopped actor is deactivated: its object is dropped, its mail and
every message sent to it for ``backoff_seconds`` are refused with
:class:`ActorStoppedError` (:class:`Stopped` says why and for how long), and the
first message after that brings it back from its stored state, with a fresh
restart budget.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Final, NamedTuple

import anyio
import structlog

from actormem.runtime._actor import Actor
from actormem.runtime._asks import Asks
from actormem.runtime._cell import Cell
from actormem.runtime._envelope import Envelope, Reply
from actormem.runtime.errors import ActorStoppedError, HandlerError

__all__ = ("STOP_HOOK_TIMEOUT", "Stopped", "Supervisor", "call_stop_hook", "handler_error")

log = structlog.get_logger("actormem.runtime")

#: How long an actor's ``on_stop`` may take.
STOP_HOOK_TIMEOUT: Final = 5.0


async def call_stop_hook(address: str, actor: Actor) -> None:
    """Run ``actor.on_stop()`` (if the class has one), shielded and bounded; log a failure."""
    if type(actor).on_stop is Actor.on_stop:
        return
    with anyio.move_on_after(STOP_HOOK_TIMEOUT, shield=True):
        try:
            await actor.on_stop()
        except Exception:
            log.exception("actor_stop_hook_failed", actor=address)


def handler_error(address: str, message: object, exc: Exception) -> HandlerError:
    """The error an asker gets when the handler of ``message`` crashed with ``exc``."""
    error = HandlerError(address, f"{type(message).__name__} failed: {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


class Stopped(NamedTuple):
    """A stopped actor's back-off: why it stopped, and until when it refuses mail."""

    reason: str
    #: ``time.monotonic()`` at which the back-off ends.
    until: float

    def left(self) -> float:
        """Seconds of back-off left (0 once it is over)."""
        return max(self.until - time.monotonic(), 0.0)

    def refusal(self, address: str) -> ActorStoppedError:
        """The error a message sent during the back-off is refused with."""
        return ActorStoppedError(
            address,
            f"{self.reason}; it takes no messages for {self.left():.1f}s more, then the "
            "next one brings it back from its stored state",
        )


class Supervisor:
    """Applies each kind's restart policy to its failing actors, and counts.

    Args:
        asks: answers the asker of a failed message, and fails a stopped actor's mail.

    Attributes:
        failures: handler crashes (not counting expected errors).
        restarts: restarts done.
    """

    __slots__ = ("_asks", "failures", "restarts")

    def __init__(self, asks: Asks) -> None:
        self._asks = asks
        self.failures = 0
        self.restarts = 0

    async def on_failure(
        self, cell: Cell, env: Envelope, exc: Exception, *, answer: bool = True
    ) -> None:
        """Log, answer the asker (unless ``answer`` is False: the envelope is
        delivered again), then resume, reset or stop the actor."""
        self.failures += 1
        body = type(env.body).__name__
        log.error(
            "actor_handler_failed",
            actor=cell.address,
            message=body,
            msg_id=env.id or None,
            exc_info=exc,
        )
        if answer and env.correlation is not None:
            error = handler_error(cell.address, env.body, exc)
            await self._asks.send_reply(env, Reply(env.correlation, error=error))
        policy = cell.kind.supervision
        now = time.monotonic()
        restarts = cell.restarts
        if restarts is None:
            restarts = cell.restarts = deque()
        while restarts and restarts[0] <= now - policy.within_seconds:
            restarts.popleft()
        if policy.strategy == "stop":
            await self.stop(cell, f"stopped after a failure in {body} (strategy 'stop')")
            return
        if len(restarts) >= policy.max_restarts:
            await self.stop(
                cell,
                f"stopped: more than {policy.max_restarts} restarts within "
                f"{policy.within_seconds:g}s (last failure: {type(exc).__name__}: {exc})",
            )
            return
        restarts.append(now)
        self.restarts += 1
        if policy.strategy == "reset" and cell.actor is not None:
            old, cell.actor = cell.actor, None
            await call_stop_hook(cell.address, old)
        log.warning("actor_restarted", strategy=policy.strategy, restarts_in_period=len(restarts))

    @staticmethod
    def restarts_left(cell: Cell) -> int:
        """Failures the actor may still have before the next one stops it (plus one)."""
        policy = cell.kind.supervision
        if policy.strategy == "stop":
            return 0
        cutoff = time.monotonic() - policy.within_seconds
        recent = sum(1 for t in cell.restarts or () if t > cutoff)
        return policy.max_restarts - recent

    async def stop(self, cell: Cell, reason: str) -> None:
        """Stop the actor: mark its cell stopped and drop the actor object (the
        dispatcher then retires the cell for the kind's ``backoff_seconds``)."""
        cell.stopped = reason
        actor, cell.actor = cell.actor, None
        if actor is not None:
            await call_stop_hook(cell.address, actor)
        log.error(
            "actor_stopped",
            actor=cell.address,
            reason=reason,
            backoff_seconds=cell.kind.supervision.backoff_seconds,
        )
