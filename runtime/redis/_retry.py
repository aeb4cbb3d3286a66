"""Retrying while Redis is away: for a while (a caller waits), or for ever (a
background loop, which must outlive a Redis restart)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

import anyio
import structlog

from actormem.runtime.errors import TransportError, TransportUnavailableError

__all__ = ("forever", "retrying")

log = structlog.get_logger("actormem.redis")

T = TypeVar("T")

#: First and longest pause between retries while Redis is unavailable.
_FIRST_BACKOFF: Final = 0.05
_MAX_BACKOFF: Final = 2.0


async def retrying(call: Callable[[], Awaitable[T]], *, what: str, retry_for: float) -> T:
    """Await ``call()`` again, with exponential backoff, while Redis is unavailable.

    ``call`` must translate redis errors itself (see ``_client.redis_errors``).

    Args:
        call: makes the attempt.
        what: what is attempted, for the logs.
        retry_for: seconds to keep trying.

    Raises:
        TransportUnavailableError: still unavailable after ``retry_for`` seconds.
        TransportError: any other failure (not retried).
    """
    deadline = time.monotonic() + retry_for
    delay = _FIRST_BACKOFF
    failed = False
    while True:
        try:
            result = await call()
        except TransportUnavailableError as exc:
            if time.monotonic() + delay > deadline:
                raise
            if not failed:
                log.warning("redis_unavailable_retrying", what=what, reason=str(exc))
                failed = True
            await anyio.sleep(delay)
            delay = min(delay * 2, _MAX_BACKOFF)
            continue
        if failed:
            log.info("redis_available_again", what=what)
        return result


async def forever(what: str, call: Callable[[], Awaitable[T]]) -> T:
    """Await ``call()`` until it succeeds, backing off while Redis is away.

    For the background loops, which must outlive a Redis restart: an
    unavailable server is waited for, and any other transport error is logged
    and tried again (a loop that died would silently stop a shard).
    """
    delay = _FIRST_BACKOFF
    failed = False
    while True:
        try:
            result = await call()
        except TransportUnavailableError as exc:
            if not failed:
                log.warning("redis_unavailable", loop=what, reason=str(exc))
                failed = True
        except TransportError as exc:
            log.error("redis_loop_error", loop=what, reason=str(exc))
            failed = True
        else:
            if failed:
                log.info("redis_reconnected", loop=what)
            return result
        await anyio.sleep(delay)
        delay = min(delay * 2, _MAX_BACKOFF)
