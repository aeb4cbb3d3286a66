"""Episodic and hierarchical memory: episodes, core memory, working memory.

MARSYS's two memory patterns, for one agent (owned by its memory actor):

- **Episodes.** Every message belongs to the episode that was open when it was
  added; :meth:`EpisodicMemory.start_episode` closes the current one and opens a
  new one with metadata. :meth:`~EpisodicMemory.recall_episode` finds the episode
  that best matches a query (BM25 over its messages and metadata), and
  :meth:`~EpisodicMemory.summarize_episodes` describes each in a line or two.
- **Hierarchy.** A message with importance at or above ``core_threshold`` (or
  tagged ``metadata["important"]``) also enters *core* memory, which ``context()``
  always includes (:meth:`~EpisodicMemory.render_core_block`); *working* memory
  holds the recent messages and, past ``working_limit``, rolls its oldest ones
  (whole tool-call units, never half of one) into *episodic* memory.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Container, Iterable, Sequence
from typing import Any, Final

import msgspec

from actormem.actors.conversation import group_units
from actormem.actors.errors import MemoryInputError
from actormem.actors.messages import Message
from actormem.actors.pool.sanitize import sanitize_insight_text
from actormem.actors.text.blocks import format_time, quote, render_block
from actormem.actors.text.bm25 import BM25
from actormem.runtime.config import ConfigSection
from actormem.runtime.ids import new_id
from actormem.runtime.state import SnapshotState
from actormem.runtime.tokens import TokenCounter

__all__ = (
    "CORE_TAG",
    "Episode",
    "EpisodeConfig",
    "EpisodeState",
    "EpisodicMemory",
    "Summarizer",
)

CORE_TAG: Final = "core_memory"
DEFAULT_WORKING_LIMIT: Final = 50
DEFAULT_ROLL_COUNT: Final = 25
DEFAULT_CORE_THRESHOLD: Final = 0.7
DEFAULT_CORE_LIMIT: Final = 20
DEFAULT_CORE_TOKENS: Final = 500
DEFAULT_MAX_EPISODES: Final = 100
DEFAULT_PREVIEW_CHARS: Final = 120
_CORE_PREAMBLE: Final = (
    "Core memory: the most important things said earlier, quoted as data with who said them."
)

#: Turns an episode's messages into a summary (an LLM summarizer, say).
Summarizer = Callable[[Sequence[Message]], str]


class EpisodeConfig(ConfigSection, frozen=True):
    """Episodic and hierarchical memory.

    Attributes:
        working_limit: messages working memory holds before it rolls.
        roll_count: how many of the oldest messages (at least) one roll moves to
            episodic memory (MARSYS: 25 of 50).
        core_threshold: importance from which a message enters core memory.
        core_limit: core messages kept (the most important, then the newest).
        core_block_tokens: the most tokens the core block may cost in context.
        max_episodes: closed episodes kept; past it the oldest is dropped.
        preview_chars: characters of a message quoted in an episode summary.
    """

    working_limit: int = DEFAULT_WORKING_LIMIT
    roll_count: int = DEFAULT_ROLL_COUNT
    core_threshold: float = DEFAULT_CORE_THRESHOLD
    core_limit: int = DEFAULT_CORE_LIMIT
    core_block_tokens: int = DEFAULT_CORE_TOKENS
    max_episodes: int = DEFAULT_MAX_EPISODES
    preview_chars: int = DEFAULT_PREVIEW_CHARS

    def __post_init__(self) -> None:
        self._at_least(1, "working_limit", "roll_count", "core_limit", "core_block_tokens")
        if self.roll_count > self.working_limit:
            raise ValueError(
                f"roll_count ({self.roll_count}) must not exceed working_limit "
                f"({self.working_limit})"
            )
        if not 0.0 <= self.core_threshold <= 1.0:
            raise ValueError(f"core_threshold must be within 0..1, got {self.core_threshold}")
        if self.max_episodes < 1 or self.preview_chars < 8:
            raise ValueError("max_episodes must be >= 1 and preview_chars >= 8")


class Episode(msgspec.Struct, frozen=True, kw_only=True):
    """One episode: the messages added while it was open, and its metadata.

    Attributes:
        id: unique.
        number: 1 for an agent's first episode, then 2, 3, ...
        metadata: what :meth:`EpisodicMemory.start_episode` was given.
        started: when it opened.
        ended: when it closed (None while open).
        messages: its messages, in order.
    """

    id: str
    number: int
    metadata: dict[str, Any]
    started: float
    ended: float | None = None
    messages: tuple[Message, ...] = ()


class EpisodeState(msgspec.Struct, frozen=True, kw_only=True):
    """What an :class:`EpisodicMemory` saves (for retention)."""

    version: int = 1
    episodes: list[Episode] = msgspec.field(default_factory=list)
    current: Episode | None = None
    working: list[str] = msgspec.field(default_factory=list)
    core: list[str] = msgspec.field(default_factory=list)


class _Open:
    __slots__ = ("id", "messages", "metadata", "number", "started")

    def __init__(self, number: int, metadata: dict[str, Any], started: float) -> None:
        self.id = new_id()
        self.number = number
        self.metadata = metadata
        self.started = started
        self.messages: list[Message] = []

    def freeze(self, ended: float | None) -> Episode:
        return Episode(
            id=self.id,
            number=self.number,
            metadata=dict(self.metadata),
            started=self.started,
            ended=ended,
            messages=tuple(self.messages),
        )


def _weight(m: Message) -> float:
    """A message's importance; a message only tagged ``important`` counts as 1.0."""
    if m.importance is not None:
        return m.importance
    return 1.0 if m.metadata.get("important") else 0.0


def _check_metadata(metadata: Any) -> dict[str, Any]:
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise MemoryInputError(f"episode metadata must be a dict, got {type(metadata).__name__}")
    try:
        msgspec.json.encode(metadata)
    except (TypeError, msgspec.EncodeError) as exc:
        raise MemoryInputError(f"episode metadata must be JSON-able: {exc}") from exc
    return dict(metadata)


class EpisodicMemory(SnapshotState[EpisodeState]):
    """Episodes plus core / working / episodic memory for one agent.

    Args:
        config: the episodes section (defaults if omitted).
        summarizer: makes an episode's summary; an extractive one by default.
        clock: the time source.
    """

    state_type = EpisodeState

    def __init__(
        self,
        config: EpisodeConfig | None = None,
        *,
        summarizer: Summarizer | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config or EpisodeConfig()
        self.summarizer = summarizer
        self.clock = clock
        self._closed: list[Episode] = []
        self._current = _Open(1, {}, clock())
        self._working: list[Message] = []
        self._episodic = 0
        self._core: dict[str, Message] = {}
        # Rendered core lines by message id: messages are immutable, sanitizing is not free.
        self._core_lines: dict[str, str] = {}
        #: Moves on every change of what :meth:`export_state` returns (the owner
        #: re-encodes the state only when it moved).
        self.changes = 0

    # -- adding ----------------------------------------------------------------------

    def add(self, messages: Message | Iterable[Message]) -> list[Message]:
        """Add messages to the current episode and working memory.

        Returns:
            The messages that rolled out of working memory into episodic memory
            (empty until working memory passes ``working_limit``).
        """
        batch = [messages] if isinstance(messages, Message) else list(messages)
        for m in batch:
            if not isinstance(m, Message):
                raise MemoryInputError(f"expected a Message, got {type(m).__name__}")
        rolled: list[Message] = []
        self.changes += 1
        for m in batch:
            self._current.messages.append(m)
            self._working.append(m)
            if self._is_core(m):
                self._core[m.id] = m
                self._trim_core()
            if len(self._working) > self.config.working_limit:
                rolled.extend(self._roll())
        return rolled

    def _is_core(self, m: Message) -> bool:
        return _weight(m) >= self.config.core_threshold or bool(m.metadata.get("important"))

    def _trim_core(self) -> None:
        while len(self._core) > self.config.core_limit:
            victim = min(self._core.values(), key=lambda m: (_weight(m), m.timestamp, m.id))
            del self._core[victim.id]

    def _roll(self) -> list[Message]:
        # Whole units only: an assistant's tool calls leave together with their results.
        # An assistant still waiting for its tool results stays, and so does all
        # after it; an orphan tool result can never complete, so it may go.
        out: list[Message] = []
        for unit in group_units(self._working):
            if len(out) >= self.config.roll_count:
                break
            if not unit.complete and unit.messages[0].role == "assistant":
                break
            out.extend(unit.messages)
        gone = {m.id for m in out}
        self._working = [m for m in self._working if m.id not in gone]
        self._episodic += len(out)
        return out

    # -- episodes ----------------------------------------------------------------------

    def start_episode(self, metadata: dict[str, Any] | None = None) -> Episode | None:
        """Close the current episode and open a new one with ``metadata``.

        An empty current episode is not kept; it only takes the new metadata.

        Returns:
            The episode just closed, or None when it was empty.

        Raises:
            MemoryInputError: ``metadata`` is not a JSON-able dict.
        """
        meta = _check_metadata(metadata)
        now = self.clock()
        self.changes += 1
        if not self._current.messages:
            self._current = _Open(self._current.number, meta, now)
            return None
        closed = self._current.freeze(now)
        self._closed.append(closed)
        if len(self._closed) > self.config.max_episodes:
            del self._closed[0]
        self._current = _Open(closed.number + 1, meta, now)
        return closed

    @property
    def current(self) -> Episode:
        """The open episode (a snapshot)."""
        return self._current.freeze(None)

    def episodes(self) -> list[Episode]:
        """Return the closed episodes kept, oldest first, then the open one if it has messages."""
        out = list(self._closed)
        if self._current.messages:
            out.append(self.current)
        return out

    def recall_episodes(self, query: str, k: int = 3) -> list[Episode]:
        """Return up to ``k`` episodes that match ``query`` best (BM25 over messages and metadata).

        Raises:
            MemoryInputError: ``query`` is not text or ``k`` is below 1.
        """
        if not isinstance(query, str):
            raise MemoryInputError(f"query must be text, got {type(query).__name__}")
        if not isinstance(k, int) or k < 1:
            raise MemoryInputError(f"k must be an integer >= 1, got {k!r}")
        episodes = self.episodes()
        docs = [
            " ".join(
                [msgspec.json.encode(e.metadata).decode()]
                + [m.searchable_text() for m in e.messages]
            )
            for e in episodes
        ]
        return [episodes[i] for i, _ in BM25(docs).top(query, k)]

    def recall_episode(self, query: str) -> Episode | None:
        """Return the episode that matches ``query`` best, or None when none does."""
        found = self.recall_episodes(query, 1)
        return found[0] if found else None

    def summarize_episodes(self) -> list[str]:
        """Return one summary per episode (closed ones, then the open one), oldest first."""
        return [self.summarize(e) for e in self.episodes()]

    def summarize(self, episode: Episode) -> str:
        """Return ``episode``'s summary: the summarizer's, else an extractive one.

        The extractive summary names the episode, its metadata, its size and time
        span, and quotes its first, last and most important messages.
        """
        if self.summarizer is not None:
            return self.summarizer(episode.messages)
        n = self.config.preview_chars
        msgs = episode.messages
        head = f"Episode {episode.number}"
        if episode.metadata:
            head += f" {msgspec.json.encode(episode.metadata).decode()}"
        if not msgs:
            return f"{head}: no messages."
        end = episode.ended if episode.ended is not None else msgs[-1].timestamp
        lines = [
            f"{head}: {len(msgs)} messages, {format_time(episode.started)} to {format_time(end)}.",
            f"Started: {quote(sanitize_insight_text(msgs[0].text(), n))}",
        ]
        if len(msgs) > 1:
            lines.append(f"Ended: {quote(sanitize_insight_text(msgs[-1].text(), n))}")
        key = max(msgs, key=_weight)
        if _weight(key) > 0 and key is not msgs[0] and key is not msgs[-1]:
            lines.append(f"Key: {quote(sanitize_insight_text(key.text(), n))}")
        return "\n".join(lines)

    # -- the hierarchy ---------------------------------------------------------------

    def core(self) -> list[Message]:
        """Return core memory in the order the messages were added."""
        return sorted(self._core.values(), key=lambda m: (m.timestamp, m.id))

    def working(self) -> list[Message]:
        """Return working memory, oldest first."""
        return list(self._working)

    @property
    def episodic_count(self) -> int:
        """Messages rolled out of working memory so far."""
        return self._episodic

    def render_core_block(
        self,
        counter: TokenCounter,
        budget_tokens: int | None = None,
        exclude: Container[str] = (),
    ) -> str | None:
        """Render core memory as a ``<core_memory>`` block of quoted data.

        The most important messages go first when the budget
        (``core_block_tokens`` by default) cannot hold them all. Messages whose
        ids are in ``exclude`` (already in the context) are left out.
        """
        budget = self.config.core_block_tokens if budget_tokens is None else budget_tokens
        ranked = sorted(
            (m for m in self._core.values() if m.id not in exclude),
            key=lambda m: (-_weight(m), -m.timestamp),
        )
        cache = self._core_lines
        if len(cache) > 2 * len(self._core):
            cache.clear()
        lines = []
        for m in ranked:
            line = cache.get(m.id)
            if line is None:
                line = cache[m.id] = (
                    f"- {quote(sanitize_insight_text(m.name or m.role, 64))} at "
                    f"{format_time(m.timestamp)}: {quote(sanitize_insight_text(m.text(), 2000))}"
                )
            lines.append(line)
        return render_block(CORE_TAG, _CORE_PREAMBLE, lines, budget, counter)

    # -- state -------------------------------------------------------------------------

    def export_state(self) -> EpisodeState:
        """Return everything as a serialisable state."""
        return EpisodeState(
            episodes=list(self._closed),
            current=self.current,
            working=[m.id for m in self._working],
            core=list(self._core),
        )

    def load_state(self, state: EpisodeState) -> None:
        """Replace everything with ``state``'s."""
        self.changes += 1
        self._closed = list(state.episodes)
        cur = state.current
        if cur is None:
            self._current = _Open(len(self._closed) + 1, {}, self.clock())
        else:
            self._current = _Open(cur.number, dict(cur.metadata), cur.started)
            self._current.id = cur.id
            self._current.messages = list(cur.messages)
        by_id = {m.id: m for e in self.episodes() for m in e.messages}
        self._working = [by_id[i] for i in state.working if i in by_id]
        self._core = {i: by_id[i] for i in state.core if i in by_id}
        total = sum(len(e.messages) for e in self.episodes())
        self._episodic = max(0, total - len(self._working))

    def revise(self, message: Message) -> bool:
        """Put the edited ``message`` where its earlier version is (episodes, working
        and core memory, which it joins or leaves by its new weight); return whether
        it was anywhere."""

        def swap(messages: Iterable[Message]) -> list[Message]:
            return [message if m.id == message.id else m for m in messages]

        held = any(m.id == message.id for e in self.episodes() for m in e.messages)
        if not held:
            return False
        self.changes += 1
        self._closed = [
            msgspec.structs.replace(e, messages=tuple(swap(e.messages)))
            if any(m.id == message.id for m in e.messages)
            else e
            for e in self._closed
        ]
        self._current.messages = swap(self._current.messages)
        self._working = swap(self._working)
        self._core_lines.pop(message.id, None)
        self._core.pop(message.id, None)
        if self._is_core(message):
            self._core[message.id] = message
            self._trim_core()
        return True

    def clear(self) -> None:
        """Forget every episode and message; a fresh first episode opens."""
        self.changes += 1
        self._closed.clear()
        self._current = _Open(1, {}, self.clock())
        self._working.clear()
        self._core.clear()
        self._episodic = 0
