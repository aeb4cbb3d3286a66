"""Time slices: the compressor's CPU work lets other actors run every few milliseconds.

Long work (summarizing thousands of sentences) is written as a generator that
yields between small steps; :func:`run_sliced` drives it and hands the event
loop back whenever a slice is used up, so no other task waits longer than about
one slice, and a compression's timeout can cancel it at the next pause.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import Final, TypeVar

import anyio.lowlevel

__all__ = ("SLICE_SECONDS", "Steps", "TimeSlicer", "run_sliced")

#: The longest stretch of CPU work between two pauses (the stall others may see).
SLICE_SECONDS: Final = 0.005
#: About what a pass over a whole view costs per message, in the steps that do not
#: pause (grouping its tool units, laying it out, checking what it sends).
VIEW_SECONDS_PER_MESSAGE: Final = 1e-6

T = TypeVar("T")

#: Work in small steps: yields None between them, returns the result.
Steps = Generator[None, None, T]


class TimeSlicer:
    """Hands the event loop back once the current slice is used up.

    Args:
        seconds: the slice's length.
    """

    __slots__ = ("_seconds", "_since")

    def __init__(self, seconds: float = SLICE_SECONDS) -> None:
        self._seconds = seconds
        self._since = time.perf_counter()

    async def pause(self, ahead: float = 0.0) -> None:
        """Yield to the event loop if the slice is used up, or would be by a step of
        ``ahead`` seconds that does not pause (a cancellation point then)."""
        if time.perf_counter() - self._since + ahead >= self._seconds:
            await anyio.lowlevel.checkpoint()
            self._since = time.perf_counter()

    async def before_view_pass(self, messages: int) -> None:
        """Pause unless the slice has room for a pass over a view of ``messages``
        messages, so the pass does not run the slice over."""
        await self.pause(messages * VIEW_SECONDS_PER_MESSAGE)


async def run_sliced(steps: Steps[T], slicer: TimeSlicer) -> T:
    """Run ``steps``, pausing with ``slicer`` between them, and return its result."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            result: T = done.value
            return result
        await slicer.pause()
