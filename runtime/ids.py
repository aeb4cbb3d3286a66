"""Identifiers: unique, time-ordered ids for messages and commands, and actor addresses.

An id is 32 lowercase hex digits: 16 of ``time.time_ns()``, 8 of a per-process
counter and 8 random ones fixed per process. Ids sort by creation time across
processes (to the nanosecond, clocks permitting) and strictly within a process
(the counter breaks ties and the clock is never allowed to step back), and two
processes collide only if they draw the same 32 random bits and counter value in
the same nanosecond.

An actor address is ``kind/key``: a non-empty kind without ``/``, a non-empty key
(which may hold ``/``), no control characters (below U+0020), at most
:data:`MAX_ADDRESS_CHARS` characters. :func:`split_address` checks one where a
message is sent and again where a worker takes one in.
"""

from __future__ import annotations

import itertools
import os
import re
import time
from typing import Final

from actormem.runtime.errors import InvalidAddressError

__all__ = ("MAX_ADDRESS_CHARS", "id_time", "new_id", "split_address")

#: The longest actor address taken (an address is part of Redis key names).
MAX_ADDRESS_CHARS: Final = 1024
_CONTROL: Final = re.compile(r"[\x00-\x1f]")

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


def split_address(address: object) -> tuple[str, str]:
    """Check an actor address and split it into its kind and key.

    Raises:
        InvalidAddressError: (a ``ValueError`` too) ``address`` is not a string
            ``kind/key`` with a non-empty kind and key, or is too long, or holds
            control characters; the message names the address and the problem.
    """
    if not isinstance(address, str):
        raise InvalidAddressError(address, "it is not a string")
    kind, sep, key = address.partition("/")
    if not sep:
        raise InvalidAddressError(address, "it has no '/'")
    if not kind:
        raise InvalidAddressError(address, "the kind (before '/') is empty")
    if not key:
        raise InvalidAddressError(address, "the key (after '/') is empty")
    if len(address) > MAX_ADDRESS_CHARS:
        raise InvalidAddressError(
            address, f"it is {len(address)} characters long, over {MAX_ADDRESS_CHARS}"
        )
    if _CONTROL.search(address) is not None:
        raise InvalidAddressError(address, "it holds control characters")
    return kind, key


def _reset_after_fork() -> None:
    global _process, _counter
    _process = os.urandom(4).hex()
    _counter = itertools.count()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)
