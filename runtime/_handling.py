"""The command a handler is handling, and the ids of the tells it sends.

The tells a handler sends while it handles a command with an id get ids derived
from it (``<id>.<n>``), so a command delivered again sends the same ids again and
their recipients skip what they already applied. While such a tell (or the
command's forward) is sent, :func:`sending_for` names the command, so that a
transport that stores effects can keep the tell with the command's commit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from actormem.runtime._envelope import Envelope

__all__ = (
    "Origin",
    "derived_id",
    "handling",
    "outside_handling",
    "sending_for",
)

#: Longest id a derived one may have before it is hashed.
_MAX_DERIVED_ID: Final = 48


class Origin:
    """The command a dispatcher is handling, how many tells its handler sent, and
    the id of the tell (or forward) being sent now."""

    __slots__ = ("envelope", "mark", "sent")

    def __init__(self, command: Envelope) -> None:
        self.envelope = command
        self.sent = 0
        self.mark = ""


#: Set while a handler runs a command that has an id (over Redis, every one).
handling: ContextVar[Origin | None] = ContextVar("actormem_handling", default=None)


def derived_id() -> str:
    """The id for a tell: ``<command id>.<n>`` for the n-th tell of a handler running
    a command with an id, so a redelivered command sends the same ids again and the
    recipients skip what they already applied; otherwise empty (the transport
    makes one)."""
    origin = handling.get()
    if origin is None:
        return ""
    origin.sent += 1
    derived = f"{origin.envelope.id}.{origin.sent}"
    if len(derived) > _MAX_DERIVED_ID:  # a chain of relays: keep ids short
        derived = hashlib.blake2b(derived.encode(), digest_size=16).hexdigest()
    origin.mark = derived
    return derived


def sending_for(envelope_id: str) -> Envelope | None:
    """The command whose handler sends the tell (or the forward) ``envelope_id`` now,
    or None when this send is no tell of a handler (an ask, a piped task's tell): a
    transport that stores effects keeps such tells with the command's commit."""
    origin = handling.get()
    if origin is None or not envelope_id or origin.mark != envelope_id:
        return None
    return origin.envelope


@contextmanager
def outside_handling() -> Iterator[None]:
    """Within it, no command is being handled: a task started here (piped work)
    sends with ids of its own, not ids derived from the command that started it."""
    token = handling.set(None)
    try:
        yield
    finally:
        handling.reset(token)
