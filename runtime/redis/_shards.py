"""What a worker holds: the shards it owns, the actors it serves on them, the
entries it has in flight; and the link through which the transport's parts reach
Redis and the runtime.
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING, ClassVar, Protocol

import anyio

from actormem.runtime._envelope import Envelope, Reply
from actormem.runtime.state import DurableChanges

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from actormem.runtime.redis._handover import HandedTell
    from actormem.runtime.redis.codec import Codec
    from actormem.runtime.redis.config import RedisConfig
    from actormem.runtime.redis.keys import Keys
    from actormem.runtime.redis.trace import Tracer
    from actormem.runtime.transports.base import TransportHost

__all__ = (
    "ActorRecord",
    "Holdings",
    "Link",
    "PendingCommit",
    "RedeliveredEnvelope",
    "Shard",
    "StreamEnvelope",
)


class Link(Protocol):
    """What the transport's parts share: the transport's id, config, key names and
    codec, and how they reach Redis and the runtime (the transport's clients and
    runtime exist only while it is open)."""

    #: The transport's id: its consumer name, its reply stream's, its leases'.
    id: str
    #: The ``[redis]`` section.
    config: RedisConfig
    #: The key names.
    keys: Keys
    #: How envelopes, replies and errors are encoded.
    codec: Codec
    #: Records the stages of the asks (None: off).
    trace: Tracer | None

    @property
    def client(self) -> aioredis.Redis:
        """The client for commands."""
        ...

    @property
    def blocking_client(self) -> aioredis.Redis:
        """The client for blocking reads."""
        ...

    @property
    def host(self) -> TransportHost:
        """The runtime envelopes are delivered to."""
        ...

    async def flush(self) -> None:
        """Wait until every envelope queued so far is in Redis."""
        ...


class StreamEnvelope(Envelope, kw_only=True):
    """An envelope read from a shard stream: where to XACK it, under which lease,
    and (once handled) the commit its replies wait for."""

    shard: int = -1
    entry: str = ""
    lease: str = ""
    commit: PendingCommit | None = None
    # Handler failures so far on this delivery (each retried at once, in order).
    failures: int = 0
    # What its handler sent: (tell id, outbox item, outbox position or, handed over
    # in memory, its record), see ``_unsent``.
    sent: list[tuple[str, tuple[str, bytes, float], int | HandedTell]] | None = None


class RedeliveredEnvelope(StreamEnvelope, kw_only=True):
    """An entry claimed after its worker died or left it: the runtime reports when
    handling it starts (the transport's ``starting`` hook), so that only attempts
    count towards ``max_deliveries``, not the deliveries of entries a dead worker had
    merely read."""

    track_start: ClassVar[bool] = True


class PendingCommit:
    """The changes of a handled command, or of a batch of one actor's commands (one
    change set for all of them), waiting for the shard's next group commit; the
    replies to them are sent only once they are stored (each encoded reply is
    stored with them: ``kept_replies``).

    Attributes:
        envelopes: the commands, in the order they were handled (one, unless a batch).
        changes: what they changed, together.
        remember: store their ids among the actor's applied ones (a durable actor's
            commands).
        replies: the replies waiting for the commit, with the command each answers.
        kept_replies: the encoded reply kept with each command, by command id.
        written: the indices in ``replies`` of those the commit call writes to their
            askers itself (the others are sent once it is stored).
    """

    __slots__ = ("changes", "envelopes", "kept_replies", "remember", "replies", "written")

    def __init__(
        self, envelopes: list[Envelope], changes: DurableChanges, remember: bool = True
    ) -> None:
        self.envelopes = envelopes
        self.changes = changes
        self.remember = remember
        self.replies: list[tuple[Envelope, Reply]] = []
        self.kept_replies: dict[str, bytes] | None = None
        self.written: frozenset[int] = frozenset()


class Shard:
    """A shard this worker owns: its lease value and the entries it has in flight."""

    __slots__ = (
        "acks",
        "calls",
        "commit_idle",
        "commit_lock",
        "commit_space",
        "commit_woken",
        "commits",
        "committed",
        "committing",
        "inflight",
        "lease",
        "number",
        "scope",
        "unsent",
        "unsent_ready",
    )

    def __init__(self, number: int, lease: str) -> None:
        self.number = number
        self.lease = lease
        self.scope = anyio.CancelScope()
        self.inflight: set[str] = set()
        # Handled entries of non-durable actors, acked in one call per batch.
        self.acks: list[str] = []
        # Durable actors' handled commands, stored in one call per batch, in order,
        # queued until their call starts.
        self.commits: list[PendingCommit] = []
        # Commit calls in flight, and the actors they hold (whose next commits wait).
        self.calls = 0
        self.committing: set[str] = set()
        # Its commit loops that wait for changes to be queued (see ``_commits``).
        self.commit_idle: list[anyio.Event] = []
        # The last of them that was woken (it takes the queue when it runs).
        self.commit_woken: anyio.Event | None = None
        self.commit_space: anyio.Event | None = None
        # Set (and dropped) after every commit call, and when one is cancelled; made
        # by whoever waits for it (see ``_commits``).
        self.committed: anyio.Event | None = None
        self.commit_lock = anyio.Lock(fast_acquire=True)
        # Tells stored by a commit, to delete once the outbox wrote through the
        # position and those handed over are done: (position, tell ids, the handed
        # over), see ``_unsent``.
        self.unsent: deque[tuple[int, list[str], list[HandedTell]]] = deque()
        self.unsent_ready = anyio.Event()


class ActorRecord:
    """What this worker remembers of one actor it serves: applied command ids."""

    __slots__ = (
        "applied",
        "busy",
        "durable",
        "inflight",
        "last_used",
        "lease",
        "loaded",
        "order",
        "shard",
        "uncommitted",
    )

    def __init__(self, shard: int, applied: list[str]) -> None:
        self.shard = shard
        # Its stored state, read with its applied ids for its first activation:
        # (the shard lease it was read under, snapshot, log); None once used.
        self.loaded: tuple[str, bytes | None, list[bytes]] | None = None
        # The shard lease the actor was activated under ('' = not activated).
        self.lease = ""
        self.applied = set(applied)
        self.order: deque[str] = deque(applied)
        self.inflight: set[str] = set()
        self.busy = 0
        self.durable = False
        self.last_used = time.monotonic()
        # Handled commands whose changes are queued for a commit.
        self.uncommitted = 0

    def remember(self, command: str, keep: int) -> None:
        """Record ``command`` as applied, forgetting the oldest beyond ``keep``."""
        self.applied.add(command)
        self.order.append(command)
        while len(self.order) > keep:
            self.applied.discard(self.order.popleft())


class Holdings:
    """The shards this worker owns and the actors it serves on them, by number and
    by address."""

    __slots__ = ("actors", "shards")

    def __init__(self) -> None:
        self.shards: dict[int, Shard] = {}
        self.actors: dict[str, ActorRecord] = {}

    def current(self, shard: Shard) -> bool:
        """True while ``shard`` is what this worker holds of its number. A task of a
        holding that was lost (the shard maybe taken again since, as a new holding)
        can run on for a moment after its cancellation: it must then change nothing
        the current holding keeps."""
        return self.shards.get(shard.number) is shard

    def dropped(self, envelope: Envelope) -> None:
        """Let go of ``envelope``: its entry and command are no longer in flight.

        An envelope delivered under a lease since lost changes nothing: what it held
        went with that holding, and the shard's current holding may have the same
        entry and command in flight (claimed again from the pending list).
        """
        if isinstance(envelope, StreamEnvelope):
            shard = self.shards.get(envelope.shard)
            if shard is None or shard.lease != envelope.lease:
                return
            shard.inflight.discard(envelope.entry)
            record = self.actors.get(envelope.recipient)
            if record is not None:
                record.inflight.discard(envelope.id)
                record.busy = max(record.busy - 1, 0)

    def settled(self) -> bool:
        """True when no entry read is in flight and no commit is queued."""
        return not any(
            shard.inflight or shard.commits or shard.calls for shard in self.shards.values()
        )

    def clear(self) -> None:
        """Forget every shard and actor."""
        self.shards.clear()
        self.actors.clear()
