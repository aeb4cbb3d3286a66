"""Pipes: background work whose outcome is told to an actor (Akka's ``pipeTo``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from actormem.runtime.errors import ActorError, RuntimeClosedError

__all__ = ("Pipes",)

log = structlog.get_logger("actormem.runtime")


class Pipes:
    """Runs piped work (see :meth:`ActorContext.pipe`) and counts what still runs.

    Args:
        tell: sends the outcome as its sender (the runtime's ``tell_as``).

    Attributes:
        running: pipes not finished yet (shutdown waits for them while it drains).
    """

    __slots__ = ("_tell", "running")

    def __init__(self, tell: Callable[[str | None, str, Any], Awaitable[None]]) -> None:
        self._tell = tell
        self.running = 0

    async def run(
        self,
        work: Callable[[], Awaitable[Any]],
        to: str,
        wrap: Callable[[Any, BaseException | None], Any] | None,
        sender: str | None = None,
    ) -> None:
        """Await ``work`` and tell ``to`` its result, or what ``wrap`` makes of
        ``(result, error)``, as ``sender``; without ``wrap`` an error is only logged."""
        self.running += 1
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
                    await self._tell(sender, to, message)
                except (ActorError, RuntimeClosedError) as exc:
                    log.warning("pipe_undelivered", to=to, reason=str(exc))
        finally:
            self.running -= 1
