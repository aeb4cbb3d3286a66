"""Per-agent long-term memory: record messages, retrieve the ones that matter now.

A :class:`LongTermMemory` is a plain object the agent memory actor owns (so only
that actor touches it). :meth:`~LongTermMemory.retrieve` ranks what was recorded
as Generative Agents does: a weighted sum of

- *recency*: ``decay ** (hours since the memory was last recalled)``,
- *importance*: the 0..1 importance given when it was recorded (else estimated
  from its text, :mod:`actormem.actors.text.importance`),
- *relevance*: the lexical ranking of :mod:`actormem.actors.text.ranker` offline;
  fused by reciprocal rank with the cosine similarity of embeddings from an
  OpenAI-compatible endpoint when one is configured (lexical alone again for a
  while after the endpoint fails),

each min-max normalised to 0..1 over the candidates, with configurable weights.
A *specific* query (one of its words is rare in the memory) ranks by relevance
first: recency and importance then weigh a tenth as much, so they order memories
about as relevant as each other and never bury the one old memory that answers it.

The control modes are AgentScope's: ``static_control`` (the memory actor
retrieves before each ``context()`` and injects :func:`render_memories_block`,
and records after each reply), ``agent_control`` (the agent calls the
``record_to_memory`` / ``retrieve_from_memory`` tools of
:mod:`actormem.actors.recall.tools`), and ``both``.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Final

import msgspec
import structlog

from actormem.actors.errors import MemoryInputError
from actormem.actors.messages import Message
from actormem.actors.pool.sanitize import sanitize_insight_text
from actormem.actors.recall.embeddings import Embedder, EmbeddingError, OpenAIEmbedder, cosine
from actormem.actors.recall.facts import FactExtractor, OpenAIFactExtractor, record_facts
from actormem.actors.recall.longterm_config import ControlMode, LongTermConfig
from actormem.actors.recall.longterm_entries import (
    MEMORIES_TAG,
    LongTermState,
    MemoryEntry,
    Recalled,
    render_memories_block,
)
from actormem.actors.recall.ranking import reciprocal_rank_fusion, score_components
from actormem.actors.text.bm25 import tokenize
from actormem.actors.text.duplicates import words
from actormem.actors.text.importance import estimate_importance
from actormem.actors.text.ranker import Ranker
from actormem.runtime.ids import new_id
from actormem.runtime.state import SnapshotState
from actormem.runtime.tokens import TokenCounter

__all__ = (
    "MEMORIES_TAG",
    "ControlMode",
    "LongTermConfig",
    "LongTermMemory",
    "LongTermState",
    "MemoryEntry",
    "Recalled",
    "render_memories_block",
)

log = structlog.get_logger("actormem.longterm")

#: What recency and importance weigh, next to relevance, for a specific query.
RELEVANCE_FIRST_SHARE: Final = 0.1
#: For a specific query, the memories ranked are the most relevant this many per
#: memory asked for (the rest are not about as relevant as those).
SPECIFIC_CANDIDATES_PER_K: Final = 10


class LongTermMemory(SnapshotState[LongTermState]):
    """One agent's long-term memory (owned by its memory actor; not thread-safe).

    Args:
        config: the long-term section (defaults if omitted).
        embedder: embeds texts; by default an :class:`OpenAIEmbedder` when
            ``embedding_base_url`` is set, else none (lexical relevance only).
        extractor: extracts facts in :meth:`record_messages`; by default an
            :class:`~actormem.actors.recall.facts.OpenAIFactExtractor` when
            ``facts_base_url`` is set, else none (messages are kept as they are).
        clock: the time source (tests pass a fake one).
    """

    state_type = LongTermState

    def __init__(
        self,
        config: LongTermConfig | None = None,
        *,
        embedder: Embedder | None = None,
        extractor: FactExtractor | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = cfg = config or LongTermConfig()
        if embedder is None and cfg.embedding_base_url:
            embedder = OpenAIEmbedder.from_env(
                cfg.embedding_base_url,
                cfg.embedding_model,
                cfg.embedding_api_key_env,
                cfg.embedding_timeout,
            )
        self.embedder = embedder
        if extractor is None and cfg.facts_base_url:
            extractor = OpenAIFactExtractor.from_env(
                cfg.facts_base_url,
                cfg.facts_model,
                cfg.facts_api_key_env,
                cfg.facts_timeout,
            )
        self.extractor = extractor
        #: Until when :meth:`record_messages` keeps messages as they are (after a failure).
        self.facts_off_until = 0.0
        self.clock = clock
        self._entries: dict[str, MemoryEntry] = {}
        self._accessed: dict[str, float] = {}
        #: Bumped when a retrieval touches memories (their recency changes): the
        #: owner's durable snapshot compares it to know the state moved.
        self.touches = 0
        #: Moves on every change of what :meth:`export_state` returns (the owner
        #: re-encodes the state only when it moved).
        self.changes = 0
        self._by_text: dict[str, str] = {}
        self._vectors: dict[str, list[float]] = {}
        self._embedding_off_until = 0.0
        self._ranker: Ranker | None = None
        self._ranker_ids: list[str] = []
        self._ranker_pos: dict[str, int] = {}
        self._specific = False

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self) -> list[MemoryEntry]:
        """Return every memory, oldest first."""
        return list(self._entries.values())

    # -- recording ------------------------------------------------------------------

    def record(self, messages: Iterable[Message]) -> list[MemoryEntry]:
        """Remember the messages whose role is in ``record_roles``; return the new entries.

        A message whose text is already remembered only raises that memory's
        importance (to the larger of the two) and makes it recent again.
        """
        out = []
        for m in messages:
            if m.role not in self.config.record_roles:
                continue
            text = m.text()
            entry = self.remember(
                text,
                self.importance_of(text) if m.importance is None else m.importance,
                speaker=m.name or m.role,
                source_message_ids=(m.id,),
                said=m.timestamp,
            )
            if entry is not None:
                out.append(entry)
        return out

    async def record_messages(self, messages: Sequence[Message]) -> list[MemoryEntry]:
        """:meth:`record`, or with an extractor, remember the facts the messages state
        (see :mod:`actormem.actors.recall.facts`); return the new entries."""
        if self.extractor is None or self.clock() < self.facts_off_until:
            return self.record(messages)
        return await record_facts(self, self.extractor, messages)

    def related(self, text: str, n: int) -> list[MemoryEntry]:
        """The ``n`` memories lexically closest to ``text``, best first (their
        recency is left as it is)."""
        scores = self._lexical_scores(text) if tokenize(text) else {}
        best = heapq.nlargest(n, scores.items(), key=lambda p: p[1])
        return [self._entries[i] for i, s in best if s > 0 and i in self._entries]

    def refresh(self, entry_id: str, importance: float) -> None:
        """Make a memory recent again, its importance raised to ``importance``."""
        old = self._entries[entry_id]
        self.changes += 1
        if importance > old.importance:
            self._entries[entry_id] = msgspec.structs.replace(old, importance=importance)
        self._accessed[entry_id] = self.clock()

    def record_texts(
        self, texts: Iterable[str], importance: float | None = None, speaker: str = "agent"
    ) -> list[MemoryEntry]:
        """Remember plain texts (what the ``record_to_memory`` tool does).

        Raises:
            MemoryInputError: ``importance`` is outside 0..1.
        """
        if importance is not None and not 0.0 <= importance <= 1.0:
            raise MemoryInputError(f"importance must be within 0..1, got {importance}")
        added = (
            self.remember(t, self.importance_of(t) if importance is None else importance, speaker)
            for t in texts
        )
        return [e for e in added if e is not None]

    def importance_of(self, text: str) -> float:
        """The importance of a text recorded without one."""
        if self.config.estimate_importance:
            return estimate_importance(text)
        return self.config.default_importance

    def remember(
        self,
        raw: str,
        importance: float,
        speaker: str,
        source_message_ids: tuple[str, ...] = (),
        said: float = 0.0,
    ) -> MemoryEntry | None:
        """Remember one text; None when it is empty, or already remembered (that
        memory is then refreshed with the larger importance)."""
        text = sanitize_insight_text(raw, self.config.max_entry_chars)
        norm = " ".join(words(text))
        if not norm:
            return None
        now = self.clock()
        same = self._by_text.get(norm)
        if same is not None:
            self.refresh(same, importance)
            return None
        entry = MemoryEntry(
            id=new_id(),
            text=text,
            importance=importance,
            created=now,
            speaker=sanitize_insight_text(speaker, 64) or "agent",
            source_message_ids=source_message_ids,
            said=said,
        )
        self.changes += 1
        self._entries[entry.id] = entry
        self._accessed[entry.id] = now
        self._by_text[norm] = entry.id
        if self._ranker is not None:  # appending keeps the index valid: no rebuild
            self._index(entry)
        if len(self._entries) > self.config.max_entries:
            victim = min(self._entries.values(), key=lambda e: (e.importance, e.created))
            self.forget(victim.id)
        return entry

    def forget(self, entry_id: str) -> bool:
        """Forget one memory; return False when there was none with that id."""
        entry = self._entries.pop(entry_id, None)
        if entry is None:
            return False
        self.changes += 1
        self._accessed.pop(entry_id, None)
        self._vectors.pop(entry_id, None)
        norm = " ".join(words(entry.text))
        if self._by_text.get(norm) == entry_id:
            del self._by_text[norm]
        position = self._ranker_pos.pop(entry_id, None)
        if self._ranker is not None and position is not None:
            self._ranker.remove(position)
        return True

    def revise(self, message: Message) -> int:
        """Bring the memories recorded from ``message`` in line with its edited
        version: its text, and its importance when it has one (a memory whose text
        is now empty, or another memory's, is forgotten); return how many changed."""
        text = sanitize_insight_text(message.text(), self.config.max_entry_chars)
        norm = " ".join(words(text))
        changed = [e for e in self._entries.values() if message.id in e.source_message_ids]
        self.changes += 1
        for old in changed:
            importance = old.importance if message.importance is None else message.importance
            accessed = self._accessed[old.id]
            self.forget(old.id)
            if not norm or norm in self._by_text:
                continue
            entry = msgspec.structs.replace(old, text=text, importance=importance)
            self._entries[entry.id] = entry
            self._accessed[entry.id] = accessed
            self._by_text[norm] = entry.id
            if self._ranker is not None:
                self._index(entry)
        return len(changed)

    def clear(self) -> None:
        """Forget everything."""
        self.changes += 1
        self._entries.clear()
        self._accessed.clear()
        self._by_text.clear()
        self._vectors.clear()
        self._ranker = None

    # -- retrieval --------------------------------------------------------------------

    def _index(self, entry: MemoryEntry) -> None:
        assert self._ranker is not None
        said = entry.said or entry.created
        turn = bool(entry.source_message_ids)  # a message, not a note the agent took
        self._ranker_pos[entry.id] = self._ranker.add(entry.text, entry.speaker, said, turn)
        self._ranker_ids.append(entry.id)

    def _lexical(self) -> Ranker:
        """The ranked index of the memories, in the order they were said."""
        if self._ranker is None or len(self._ranker_ids) > 2 * len(self._entries) + 64:
            self._ranker = Ranker()
            self._ranker_ids = []
            self._ranker_pos = {}
            for entry in self._entries.values():
                self._index(entry)
        return self._ranker

    def _lexical_scores(self, query: str) -> dict[str, float]:
        """Lexical scores of the memories the query reaches (the others score 0; a
        forgotten memory's slot reaches nothing); notes whether the query is specific."""
        scores, self._specific = self._lexical().search(query, self.config.specific_share)
        ids = self._ranker_ids
        return {ids[n]: score for n, score in scores.items() if score > 0}

    async def _embedding_scores(self, query: str) -> dict[str, float] | None:
        embedder = self.embedder
        now = self.clock()
        if embedder is None or now < self._embedding_off_until:
            return None
        missing = [i for i in self._entries if i not in self._vectors]
        try:
            vectors = await embedder.embed([self._entries[i].text for i in missing] + [query])
            if len(vectors) != len(missing) + 1:
                raise EmbeddingError(f"expected {len(missing) + 1} vectors, got {len(vectors)}")
        except Exception as exc:  # any failure of an optional endpoint means BM25 for now
            self._embedding_off_until = now + self.config.embedding_retry_after
            log.warning(
                "longterm_embedding_failed",
                reason=f"{type(exc).__name__}: {exc}",
                fallback="bm25",
                retry_after=self.config.embedding_retry_after,
            )
            return None
        # The memory may have changed during the await (a caller running this in
        # the background): keep vectors only of entries still here, and score
        # only entries that have one.
        for i, vec in zip(missing, vectors[:-1], strict=True):
            if i in self._entries:
                self._vectors[i] = vec
        q = vectors[-1]
        return {i: cosine(q, v) for i, v in self._vectors.items() if i in self._entries}

    async def retrieve(self, query: str, k: int | None = None) -> list[Recalled]:
        """Return up to ``k`` memories (``top_k`` by default), best first.

        Relevance is the lexical ranking (:mod:`actormem.actors.text.ranker`), fused
        with the embeddings' ranking by reciprocal rank when an embedder is set and
        working. See the module doc for the score.

        Raises:
            MemoryInputError: ``k`` is below 1 or ``query`` is not text.
        """
        if not isinstance(query, str):
            raise MemoryInputError(f"query must be text, got {type(query).__name__}")
        semantic = await self._embedding_scores(query) if query.strip() else None
        return self._rank(query, k, semantic)

    def retrieve_lexical(self, query: str, k: int | None = None) -> list[Recalled]:
        """:meth:`retrieve` with lexical relevance only, without awaiting anything."""
        if not isinstance(query, str):
            raise MemoryInputError(f"query must be text, got {type(query).__name__}")
        return self._rank(query, k, None)

    def _rank(self, query: str, k: int | None, semantic: dict[str, float] | None) -> list[Recalled]:
        k = self.config.top_k if k is None else k
        if not isinstance(k, int) or k < 1:
            raise MemoryInputError(f"k must be an integer >= 1, got {k!r}")
        if not self._entries:
            return []
        cfg = self.config
        words = tokenize(query)
        self._specific = False
        lexical = self._lexical_scores(query) if words else {}
        if semantic is not None:
            relevance = reciprocal_rank_fusion([lexical, semantic])
            ids = list(self._entries)
        else:
            relevance = lexical
            # Only memories the query reaches: the postings name them, so ranking
            # does not touch the whole memory.
            ids = list(lexical) if cfg.require_relevance and words else list(self._entries)
            if not ids:
                return []
        # A query that asks for something in particular ranks by relevance: recency
        # and importance only order memories about as relevant as each other.
        specific = bool(lexical) and cfg.relevance_weight > 0 and self._specific
        others = RELEVANCE_FIRST_SHARE if specific else 1.0
        if specific and len(ids) > SPECIFIC_CANDIDATES_PER_K * k:
            ids = heapq.nlargest(SPECIFIC_CANDIDATES_PER_K * k, ids, key=relevance.__getitem__)
        now = self.clock()
        components = score_components(
            [max(0.0, now - self._accessed[i]) / cfg.recency_unit_seconds for i in ids],
            [self._entries[i].importance for i in ids],
            [relevance.get(i, 0.0) for i in ids],
            cfg.recency_decay,
        )
        wr, wi, wl = (
            others * cfg.recency_weight,
            others * cfg.importance_weight,
            cfg.relevance_weight,
        )
        entries = self._entries
        scores = [wr * rc + wi * im + wl * rl for rc, im, rl in components]
        best = heapq.nlargest(
            k, range(len(ids)), key=lambda n: (scores[n], entries[ids[n]].created)
        )
        top = [
            Recalled(
                entry=entries[ids[n]],
                score=scores[n],
                recency=components[n][0],
                importance=components[n][1],
                relevance=components[n][2],
            )
            for n in best
        ]
        if cfg.touch_on_retrieve and top:
            self.touches += 1
            self.changes += 1
            for r in top:
                self._accessed[r.entry.id] = now
        return top

    async def context_block(self, query: str, counter: TokenCounter) -> str | None:
        """Static control: the ``top_k`` memories for ``query`` as a block of ``block_tokens``."""
        recalled = await self.retrieve(query)
        return render_memories_block(recalled, self.config.block_tokens, counter)

    async def aclose(self) -> None:
        """Close the embedder's and the extractor's HTTP clients, if they have one."""
        for client in (self.embedder, self.extractor):
            close = getattr(client, "aclose", None)
            if close is not None:
                await close()

    # -- state ------------------------------------------------------------------------

    def export_state(self) -> LongTermState:
        """Return the memories as a serialisable state (embeddings are recomputed)."""
        return LongTermState(entries=list(self._entries.values()), accessed=dict(self._accessed))

    def load_state(self, state: LongTermState) -> None:
        """Replace the memories with ``state``'s."""
        self.clear()
        for e in state.entries:
            self._entries[e.id] = e
            self._accessed[e.id] = state.accessed.get(e.id, e.created)
            self._by_text.setdefault(" ".join(words(e.text)), e.id)
