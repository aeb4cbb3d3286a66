"""Helpers shared by the Redis tests."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio


async def eventually(check: Callable[[], Awaitable[bool]], what: str, limit: float = 40.0) -> None:
    """Poll ``check`` until it holds: a bound on waiting, never a timing assertion.

    Raises:
        AssertionError: ``check`` did not hold within ``limit`` seconds.
    """
    with anyio.move_on_after(limit):
        while not await check():  # noqa: ASYNC110 (polling Redis from outside)
            await anyio.sleep(0.05)
        return
    raise AssertionError(f"never happened: {what}")
