"""The snapshot of an agent memory's durable state, and its encoding.

A memory's durable state is its original history as an append-only log (one
encoded message per entry) plus a snapshot of everything else. The working view
is stored as message ids into the history plus the messages the history does not
hold (compressed forms), and so are the episodes' messages: a snapshot does not
repeat what the log holds.

The log also holds the insight deliveries applied since the last snapshot, one
entry each (:class:`LoggedDelivery`, a msgpack array where a message is a map):
a delivery changes only the inbox, which the next snapshot holds whole, so
between snapshots a delivery costs one log entry, not a snapshot of the inbox.
On load they are applied again after the snapshot, in the order they were logged.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from actormem.actors.memory.commands import (
    Add,
    Context,
    Expire,
    Export,
    Get,
    HeldInsights,
    MemoryTools,
    RecallEpisode,
    Reload,
    Retrieve,
    Search,
    Stats,
    ToPool,
)
from actormem.actors.memory.compaction import Compaction, CompactionState
from actormem.actors.memory.store import MessageStore
from actormem.actors.messages import Message, decode_message
from actormem.actors.pool.insights import InsightDelivery
from actormem.actors.recall.agent import AgentRecall
from actormem.actors.recall.episodes import Episode, EpisodeState, EpisodicMemory

__all__ = (
    "REPLAYABLE",
    "LoggedDelivery",
    "LoggedEpisodes",
    "MemorySnapshot",
    "decode_snapshot",
    "encode_delivery",
    "encode_snapshot",
    "is_logged_delivery",
    "restore_episodes",
    "restore_store",
)

#: Commands whose whole effect on the state a replay of the log reproduces (adds,
#: logged insight deliveries) or that change nothing (reads, a retrieval's touches
#: aside, and commands handed on to the pool): after them, no new snapshot is
#: needed unless the working view was rewritten or recall changed otherwise (both
#: tracked; a delivery that is not logged counts as a change of recall).
REPLAYABLE: frozenset[type] = frozenset(
    {
        *(Add, Context, Get, Search, Stats, Export, Reload, HeldInsights, MemoryTools),
        *(RecallEpisode, Expire, ToPool, Retrieve, InsightDelivery),
    }
)


class MemorySnapshot(msgspec.Struct, kw_only=True):
    """The non-history part of a memory's durable state. New fields go last, with defaults."""

    working: list[str]
    extra: list[Message] = []
    offloaded: dict[str, list[Message]] = {}
    history_skip: int = 0
    version: int = 0
    recall: dict[str, bytes] = {}
    compressions: int = 0
    tokens_saved: int = 0
    peak_tokens: int = 0
    peak_size: int = 0
    # Log entries (counted from the log's start, deliveries included) this snapshot
    # accounts for: the ones after it were added by plain adds, or are insight
    # deliveries, and are replayed as such on load. -1: all of them (snapshots
    # written before the mark existed).
    log_mark: int = -1
    # Ids of added messages recall has not taken in yet (it is made on first
    # read); None when recall was made and its state is in ``recall``.
    unobserved: list[str] | None = None
    # Ids of observed messages recall records at the next reply.
    awaiting_reply: list[str] = []
    # The compression rounds: the one in flight, resumed on activation.
    compaction: CompactionState | None = None
    # When the agent last had a command (retention.ttl; None: not tracked).
    active_at: float | None = None
    # Updated messages recall holds (not taken in yet, or awaiting a reply) as it
    # holds them: one deleted from the working view since is in no other part.
    held: list[Message] = []
    # The episodes (:class:`LoggedEpisodes`), when recall's state is in ``recall``
    # but for them; None: they are in ``recall`` whole, if anywhere.
    episodes: bytes | None = None


class _LoggedEpisode(msgspec.Struct, frozen=True, kw_only=True):
    """An :class:`Episode` with each message the history holds as its id."""

    id: str
    number: int
    metadata: dict[str, Any]
    started: float
    ended: float | None = None
    messages: tuple[Message | str, ...] = ()


class _LoggedEpisodeState(msgspec.Struct, frozen=True, kw_only=True):
    """An :class:`EpisodeState` of :class:`_LoggedEpisode`."""

    version: int = 1
    episodes: list[_LoggedEpisode] = []
    current: _LoggedEpisode | None = None
    working: list[str] = []
    core: list[str] = []


_episodes_decoder = msgspec.msgpack.Decoder(_LoggedEpisodeState)
_E = TypeVar("_E", Episode, _LoggedEpisode)


def _with_messages(
    kind: type[_E], episode: Episode | _LoggedEpisode, messages: tuple[Any, ...]
) -> _E:
    """``episode`` as a ``kind``, with ``messages``."""
    return kind(
        id=episode.id,
        number=episode.number,
        metadata=episode.metadata,
        started=episode.started,
        ended=episode.ended,
        messages=messages,
    )


def _first_by_id(messages: list[Message], into: dict[str, Message]) -> None:
    """Index ``messages`` by id, the first of an id kept (as on restore)."""
    for m in messages:
        into.setdefault(m.id, m)


class LoggedEpisodes:
    """Encodes a memory's episodes for its snapshot, each message the history holds
    as it is (unedited) as its id: the log already holds it.

    The encoding is kept until the episodes change or the history is replaced.
    """

    __slots__ = ("_by_id", "_history", "_indexed", "_kept")

    def __init__(self) -> None:
        self._history: list[Message] | None = None
        self._indexed = 0
        self._by_id: dict[str, Message] = {}
        self._kept: tuple[EpisodicMemory, int, bytes] | None = None

    def encode(self, episodes: EpisodicMemory, history: list[Message]) -> bytes:
        """The episodes' state, encoded, messages of ``history`` (the store's) by id."""
        if history is not self._history or len(history) < self._indexed:
            # Replaced (a wipe, a load, a restore): a kept id may name nothing now.
            self._history, self._indexed, self._by_id, self._kept = history, 0, {}, None
        if len(history) > self._indexed:
            _first_by_id(history[self._indexed :], self._by_id)
            self._indexed = len(history)
        kept = self._kept
        if kept is None or kept[0] is not episodes or kept[1] != episodes.changes:
            state = episodes.export_state()
            by_id = self._by_id

            def in_history(m: Message) -> bool:
                held = by_id.get(m.id)
                return held is m or held == m

            def logged(e: Episode) -> _LoggedEpisode:
                messages = tuple(m.id if in_history(m) else m for m in e.messages)
                return _with_messages(_LoggedEpisode, e, messages)

            encoded = _encoder.encode(
                _LoggedEpisodeState(
                    episodes=[logged(e) for e in state.episodes],
                    current=None if state.current is None else logged(state.current),
                    working=state.working,
                    core=state.core,
                )
            )
            kept = self._kept = (episodes, episodes.changes, encoded)
        return kept[2]


def restore_episodes(episodes: EpisodicMemory, data: bytes, history: list[Message]) -> None:
    """Load what :meth:`LoggedEpisodes.encode` made into ``episodes``, the ids
    resolved in the restored ``history`` (an id it lacks is left out)."""
    state = _episodes_decoder.decode(data)
    by_id: dict[str, Message] = {}
    _first_by_id(history, by_id)

    def resolved(e: _LoggedEpisode) -> Episode:
        messages = (by_id.get(m) if isinstance(m, str) else m for m in e.messages)
        return _with_messages(Episode, e, tuple(m for m in messages if m is not None))

    episodes.load_state(
        EpisodeState(
            episodes=[resolved(e) for e in state.episodes],
            current=None if state.current is None else resolved(state.current),
            working=state.working,
            core=state.core,
        )
    )


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(MemorySnapshot)


class LoggedDelivery(msgspec.Struct, frozen=True, array_like=True):
    """An insight delivery as a log entry: the pool that sent it (the envelope's
    sender) and the delivery. Encoded as an array, told apart from a message (a map)."""

    pool: str
    delivery: InsightDelivery


_delivery_decoder = msgspec.msgpack.Decoder(LoggedDelivery)


def encode_delivery(pool: str, delivery: InsightDelivery) -> bytes:
    """The log entry of ``delivery``, applied from ``pool``."""
    return _encoder.encode(LoggedDelivery(pool, delivery))


def is_logged_delivery(entry: bytes) -> bool:
    """True when the log entry ``entry`` is a :class:`LoggedDelivery` (a msgpack
    array: fixarray, array 16 or array 32), not a message (a map)."""
    return bool(entry) and (0x90 <= entry[0] <= 0x9F or entry[0] in (0xDC, 0xDD))


def encode_snapshot(
    store: MessageStore,
    compaction: Compaction,
    recall: AgentRecall | None,
    unobserved: list[Message] | None,
    active_at: float | None = None,
    episodes: LoggedEpisodes | None = None,
    deliveries: int = 0,
) -> bytes:
    """Return the snapshot of a memory's state but its history, encoded.

    Args:
        store: the messages.
        compaction: the compression counters and rounds.
        recall: the agent's recall, or None when it has not been made.
        unobserved: messages added before recall was made (only without recall).
        active_at: when the agent last had a command, if tracked.
        episodes: encodes recall's episodes apart (their messages by id); None puts
            them into the recall states whole.
        deliveries: insight deliveries in the stored log (after ``history_skip``),
            counted in the snapshot's mark.
    """
    in_history = store.history_ids
    edited = store.edited
    holding = recall.awaiting_reply if recall is not None else unobserved or ()
    logged = None
    without: tuple[str, ...] = ()
    if recall is not None and episodes is not None:
        logged = episodes.encode(recall.episodes, store.history)
        without = ("episodes",)
    snapshot = MemorySnapshot(
        working=[m.id for m in store.working],
        # Compressed forms, and updated messages (their id names the original in the history).
        extra=[m for m in store.working if m.id not in in_history or m.id in edited],
        offloaded=store.offloaded,
        history_skip=store.history_skip,
        version=store.version,
        recall=recall.component_states(without) if recall is not None else {},
        compressions=compaction.compressions,
        tokens_saved=compaction.tokens_saved,
        peak_tokens=store.peak_tokens,
        peak_size=store.peak_size,
        log_mark=store.history_skip + len(store.history) + deliveries,
        unobserved=None if recall is not None else [m.id for m in unobserved or ()],
        awaiting_reply=[m.id for m in recall.awaiting_reply] if recall is not None else [],
        compaction=compaction.state(),
        active_at=active_at,
        held=[m for m in holding if m.id in edited],
        episodes=logged,
    )
    return _encoder.encode(snapshot)


def decode_snapshot(snapshot: bytes | None) -> MemorySnapshot:
    """Decode a stored snapshot; None (only plain adds so far) replays the whole log."""
    if snapshot:
        return _decoder.decode(snapshot)
    return MemorySnapshot(working=[], log_mark=0, unobserved=[])


def restore_store(
    store: MessageStore, compaction: Compaction, state: MemorySnapshot, log: list[bytes]
) -> tuple[dict[str, Message], list[Message], list[LoggedDelivery], int]:
    """Rebuild the messages and counters from a snapshot and the stored log.

    Returns:
        Every known message by id; the log's messages after the snapshot's mark
        (added by plain adds since, replayed as such); the insight deliveries after
        the mark, in log order; and how many deliveries the log holds after
        ``history_skip``.

    Raises:
        msgspec.ValidationError: a delivery entry is not a :class:`LoggedDelivery`.
        MemoryInputError: a message entry is not a valid message.
    """
    skip = store.history_skip = state.history_skip
    mark = len(log) if state.log_mark < 0 else min(max(state.log_mark, skip), len(log))
    history: list[Message] = []
    replay: list[Message] = []
    deliveries: list[LoggedDelivery] = []
    logged = 0
    for index in range(skip, len(log)):
        entry = log[index]
        if is_logged_delivery(entry):
            logged += 1
            if index >= mark:
                deliveries.append(_delivery_decoder.decode(entry))
            continue
        message = decode_message(entry)
        history.append(message)
        if index >= mark:
            replay.append(message)
    store.history = history
    store.history_ids = {m.id for m in history}
    store.history_tokens = sum(m.tokens for m in history)
    by_id = {m.id: m for m in history}
    # An offloaded block holds its messages as the working view had them, edits
    # included: the version recall may not have taken in yet.
    ids = store.history_ids
    by_id.update((m.id, m) for block in state.offloaded.values() for m in block if m.id in ids)
    by_id.update((m.id, m) for m in state.extra)
    store.working = [by_id[i] for i in state.working if i in by_id] + replay
    store.working_tokens = sum(m.tokens for m in store.working)
    store.edited = {m.id for m in (*state.extra, *state.held) if m.id in store.history_ids}
    by_id.update((m.id, m) for m in state.held)
    store.offloaded = state.offloaded
    store.version = state.version
    store.peak_tokens = state.peak_tokens
    store.peak_size = state.peak_size
    store.note_peak()
    compaction.compressions = state.compressions
    compaction.tokens_saved = state.tokens_saved
    compaction.restore(state.compaction)
    return by_id, replay, deliveries, logged
