"""Unique, time-ordered identifiers for messages and commands.

An id is 32 lowercase hex digits: 16 of ``time.time_ns()``, 8 of a per-process
counter and 8 random ones fixed per process. Ids sort by creation time across
processes (to the nanosecond, clocks permitting) and strictly within a process
(the counter breaks ties and the clock is never allowed to step back), and two
processes collide only if they draw the same 32 random bits and counter value in
the same nanosecond.
"""

from __future__ import annotations

import itertools
import os
import time

__all__ = ("id_time", "new_id")

_counter = itertools.count()
_process = os.urandom(4).hex()
_last_ns = 0


def new_id() -> str:
    """Return a new unique id that sorts after every id made before it in this process."""
    global _last_ns
    now = time.time_ns()
    if now <= _last_ns:
        now = _last_ns + 1
    _last_ns = now
    return f"{now:016x}{next(_counter) & 0xFFFFFFFF:08x}{_process}"


def id_time(ident: str) -> float:
    """Return the creation time (seconds since the epoch) encoded in an id from :func:`new_id`.

    Raises:
        ValueError: ``ident`` is not an id made by :func:`new_id`.
    """
    if len(ident) != 32:
        raise ValueError(f"not an actormem id: {ident!r}")
    return int(ident[:16], 16) / 1e9


def _reset_after_fork() -> None:
    global _process, _counter
    _process = os.urandom(4).hex()
    _counter = itertools.count()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)
