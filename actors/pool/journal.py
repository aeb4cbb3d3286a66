"""The pool's durable changes as a journal of what each command did, with a snapshot
now and then.

A pool's state grows with its subscribers: every new insight adds a pending
delivery to each recipient's cursor, so the whole state, encoded again after every
share, would make a share's commit cost grow with the number of agents (and
every pending copy of every insight). Instead each command that changes the state
adds one entry to the durable log, saying what it did (the insight it stored and
the ones it evicted, who it was delivered to, a subscription, a confirmation),
and a restored pool replays those entries over the last snapshot. A snapshot of
the whole state replaces the log once the entries since the last one hold as
many bytes as it does (or :data:`MAX_ENTRIES` of them), so storing costs about
twice what the entries themselves hold, however large the pool.

An entry records the outcome, not the command: nothing is decided again on
replay (no clock, no id, no order of a table), so a restored pool numbers its
deliveries exactly as the pool that stored them did. Forgetting a source writes
a snapshot and replaces the log: the entries before it quote the erased text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, cast

import msgspec

from actormem.actors.pool.commands import ShareResult
from actormem.actors.pool.insights import Insight
from actormem.runtime.state import DurableChanges

__all__ = (
    "MAX_ENTRIES",
    "Acked",
    "Copied",
    "Fed",
    "Journal",
    "Op",
    "Shared",
    "Subscribed",
    "Unsubscribed",
    "decode_op",
)

#: Entries after which the next change is a snapshot that replaces the log.
MAX_ENTRIES: Final = 1_000
#: Bytes of entries always allowed before a snapshot, however small it is.
MIN_BYTES: Final = 64 << 10


class Shared(msgspec.Struct, frozen=True, kw_only=True, tag="shared"):
    """A share applied under command id ``id``: its answer; for a new insight, the
    insights the topic's limit evicted and the agents it was delivered to, in order."""

    id: str
    result: ShareResult
    evicted: list[str] = []
    recipients: list[str] = []


class Subscribed(msgspec.Struct, frozen=True, kw_only=True, tag="subscribed"):
    """``agent`` subscribed to ``topics`` and got the held insights ``backfill`` (ids)."""

    agent: str
    topics: list[str]
    backfill: list[str] = []


class Unsubscribed(msgspec.Struct, frozen=True, kw_only=True, tag="unsubscribed"):
    """``agent`` unsubscribed from ``topics``."""

    agent: str
    topics: list[str]


class Acked(msgspec.Struct, frozen=True, kw_only=True, tag="acked"):
    """``agent``'s memory confirmed its deliveries up to ``through``."""

    agent: str
    through: int


class Copied(msgspec.Struct, frozen=True, kw_only=True, tag="copied"):
    """Another partition's new ``insight`` was stored here: the insights the topic's
    limit evicted, and this partition's agents it was delivered to, in order."""

    insight: Insight
    evicted: list[str] = []
    recipients: list[str] = []


class Fed(msgspec.Struct, frozen=True, kw_only=True, tag="fed"):
    """A tick's feeds: per agent, the ids of the insights delivered to it, in order."""

    feeds: list[tuple[str, list[str]]]


Op = Shared | Subscribed | Unsubscribed | Acked | Copied | Fed

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Op)


def decode_op(entry: bytes) -> Op:
    """One stored journal entry.

    Raises:
        msgspec.DecodeError: the entry is not one.
    """
    return cast(Op, _decoder.decode(entry))


class Journal:
    """The entries of the commands handled since the last durable change, and when
    the next change is a snapshot instead.

    Attributes:
        rewrite: the next change must be a snapshot that replaces the log (a source
            was forgotten: the entries quote what it shared).
    """

    __slots__ = ("_bytes", "_entries", "_pending", "_snapshot_bytes", "rewrite")

    def __init__(self) -> None:
        self._pending: list[bytes] = []
        # Entries (and their bytes) in the stored log since the stored snapshot.
        self._entries = 0
        self._bytes = 0
        self._snapshot_bytes = 0
        self.rewrite = False

    def record(self, op: Op) -> None:
        """Add what a command did."""
        self._pending.append(_encoder.encode(op))

    def restored(self, snapshot: bytes | None, log: list[bytes]) -> None:
        """Take the sizes of what a restore read (the stored snapshot and log)."""
        self._pending = []
        self._entries = len(log)
        self._bytes = sum(map(len, log))
        self._snapshot_bytes = len(snapshot or b"")
        self.rewrite = False

    def changes(
        self, export: Callable[[], msgspec.Struct], *, trim_streams: bool
    ) -> DurableChanges:
        """The durable change of the commands since the last call: their entries, or
        the whole state (``export()``, taken only when it is due) replacing the log.
        """
        appends, self._pending = self._pending, []
        if not appends and not self.rewrite:
            return DurableChanges([], trim_streams=trim_streams)
        size = sum(map(len, appends))
        entries = self._entries + len(appends)
        grown = self._bytes + size
        due = entries > MAX_ENTRIES or grown > max(MIN_BYTES, self._snapshot_bytes)
        if not (self.rewrite or due):
            self._entries, self._bytes = entries, grown
            return DurableChanges(appends, trim_streams=trim_streams)
        data = _encoder.encode(export())
        self._entries = self._bytes = 0
        self._snapshot_bytes = len(data)
        self.rewrite = False
        return DurableChanges([], data, replace_log=True, trim_streams=trim_streams)
