"""The optional protocol that makes an actor's state durable in Redis.

An actor that implements :class:`Durable` is a *virtual actor* on the Redis
transport: its state is loaded when it is activated (first message on this
worker), every handled command's changes are stored together with the command's
id and the stream XACK in one fenced Lua call, and it is passivated (dropped from
memory) after ``passivate_after`` idle seconds.

State has two parts, so an agent's ever-growing history is never rewritten:

* the **log**: append-only entries (an agent's original history), RPUSHed
  incrementally: only the entries added since the last commit travel;
* the **snapshot**: everything else (working view, offload store, counters), one
  opaque ``bytes`` rewritten when it changed.

Both are bytes the actor encodes itself (msgpack via msgspec; never pickle).
"""

from __future__ import annotations

from typing import NamedTuple, Protocol, TypeGuard, runtime_checkable

__all__ = ("Durable", "DurableChanges", "is_durable")


class DurableChanges(NamedTuple):
    """What changed in a durable actor since the last commit.

    Attributes:
        log_appends: log entries added, in order.
        snapshot: the new snapshot, or None if the rest of the state is unchanged.
        replace_log: the log was rewritten (cleared, or loaded over): the stored
            log is replaced by ``log_appends`` instead of extended. Rare by design:
            an agent's history is append-only.
    """

    log_appends: list[bytes]
    snapshot: bytes | None = None
    replace_log: bool = False


@runtime_checkable
class Durable(Protocol):
    """What an actor implements to keep its state in Redis."""

    def durable_changes(self) -> DurableChanges | tuple[list[bytes], bytes | None]:
        """Return the changes since the last call and start tracking anew.

        Returns:
            A :class:`DurableChanges`, or just ``(log_appends, snapshot)``: log
            entries appended since the last call (in order), and the new snapshot,
            or None when the non-log state did not change. Called once after every
            handled command; when storing them fails, the actor is dropped and
            later reloaded from what was stored, so changes are never asked twice.
        """
        ...

    def durable_restore(self, snapshot: bytes | None, log: list[bytes]) -> None:
        """Load stored state into a fresh actor, before ``on_start``.

        Args:
            snapshot: the last stored snapshot, or None if none was stored.
            log: every log entry stored, oldest first.
        """
        ...


def is_durable(actor: object) -> TypeGuard[Durable]:
    """True when ``actor`` implements :class:`Durable`."""
    return callable(getattr(actor, "durable_changes", None)) and callable(
        getattr(actor, "durable_restore", None)
    )
