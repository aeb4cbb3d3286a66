"""The one persistence protocol for an actor's state: :class:`Durable`.

State that implements it is kept by whatever store holds it, in two parts, so an
ever-growing history is never rewritten:

* the **log**: append-only entries, handed over incrementally: only the entries
  added since the last call travel;
* the **snapshot**: everything else, one opaque ``bytes`` handed over when it
  changed.

Both are bytes the state encodes itself (msgpack via msgspec; never pickle), so a
store never needs to know what they hold. The stores:

* the Redis transport (:mod:`actormem.runtime.redis`) keeps the state of
  an actor that implements :class:`Durable`: it restores it on activation and
  stores its changes after every handled command;
* a part of an actor (an application's own store, a session file) may implement
  it too, with a snapshot alone: the actor then puts the part's snapshot into its
  own, and the same bytes go wherever the part is kept.
"""

from __future__ import annotations

from typing import (
    Any,
    ClassVar,
    Generic,
    NamedTuple,
    Protocol,
    TypeGuard,
    TypeVar,
    runtime_checkable,
)

import msgspec

__all__ = ("Durable", "DurableChanges", "SnapshotState", "is_durable")

S = TypeVar("S")

_encoder = msgspec.msgpack.Encoder()


class DurableChanges(NamedTuple):
    """What changed in durable state since the last call.

    Attributes:
        log_appends: log entries added, in order.
        snapshot: the new snapshot, or None if the rest of the state is unchanged.
        replace_log: the log was rewritten (cleared, or loaded over): the stored
            log is replaced by ``log_appends`` instead of extended. Rare by design:
            a history is append-only.
        erase: what the state held before was erased (a right to be forgotten):
            a store also removes the copies it keeps elsewhere of what was sent to
            or by the actor up to this change (stream entries, dead letters). An
            empty ``snapshot`` with ``erase`` deletes the stored snapshot.
        expire_after: seconds after which a store may drop the stored state if no
            later change came (the state expires); None keeps it.
        discarded: the command was dropped without effect, and what it carried may
            quote what an erasure removed (a late result): a store deletes the copy
            it keeps of the command itself (its stream entry) once it is settled.
        due_at: when the actor is next to be told about its state (wall-clock time;
            its expiry, say). A store keeps it with the state (over Redis in its
            shard's due set), so that whichever process serves the actor then
            finds it (``Runtime.take_due``), even after the one that stored it
            died; None leaves the time kept, 0 or less removes it, and so does a
            deleted snapshot.
        trim_streams: what this change erased may be quoted by messages sent
            before it (the insights of a forgotten source, in deliveries to their
            subscribers): a store drops its copies of every message sent so far once
            each is settled (the shard streams, trimmed below their acked entries).
    """

    log_appends: list[bytes]
    snapshot: bytes | None = None
    replace_log: bool = False
    erase: bool = False
    expire_after: float | None = None
    discarded: bool = False
    due_at: float | None = None
    trim_streams: bool = False


@runtime_checkable
class Durable(Protocol):
    """What state implements to be kept: its changes out, and what was kept back in."""

    def durable_changes(self) -> DurableChanges | tuple[list[bytes], bytes | None]:
        """Return the changes since the last call and start tracking anew.

        Returns:
            A :class:`DurableChanges`, or just ``(log_appends, snapshot)``: log
            entries appended since the last call (in order), and the new snapshot,
            or None when the non-log state did not change. A store that fails to
            keep them drops the state and restores it later from what it kept, so
            changes are never asked twice.
        """
        ...

    def durable_restore(self, snapshot: bytes | None, log: list[bytes]) -> None:
        """Load kept state into fresh state.

        Args:
            snapshot: the last snapshot kept, or None if none was.
            log: every log entry kept, oldest first.
        """
        ...


def is_durable(obj: object) -> TypeGuard[Durable]:
    """True when ``obj`` implements :class:`Durable`."""
    return callable(getattr(obj, "durable_changes", None)) and callable(
        getattr(obj, "durable_restore", None)
    )


class SnapshotState(Generic[S]):
    """:class:`Durable` by a snapshot alone, with no log: the value :meth:`export_state`
    returns (a msgspec Struct), msgpack-encoded, whole on every call.

    A subclass sets ``state_type`` (what a snapshot decodes to) and implements
    :meth:`export_state` and :meth:`load_state`.
    """

    __slots__ = ()

    state_type: ClassVar[type[Any]]

    def export_state(self) -> S:
        """Return the state as a msgspec Struct."""
        raise NotImplementedError

    def load_state(self, state: S) -> None:
        """Replace the state with ``state``."""
        raise NotImplementedError

    def durable_changes(self) -> DurableChanges:
        """The whole state as the snapshot (there is no log)."""
        return DurableChanges([], _encoder.encode(self.export_state()))

    def durable_restore(self, snapshot: bytes | None, log: list[bytes]) -> None:
        """Load a snapshot :meth:`durable_changes` made; None keeps the state.

        Raises:
            msgspec.DecodeError: the snapshot is not a ``state_type``.
        """
        if snapshot is not None:
            self.load_state(msgspec.msgpack.decode(snapshot, type=self.state_type))
