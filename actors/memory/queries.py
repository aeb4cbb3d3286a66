"""Reading an agent's messages: filtered gets, substring or ranked search, offloaded
blocks and exports."""

from __future__ import annotations

import time
from collections.abc import Callable

from actormem.actors.errors import MemoryInputError
from actormem.actors.memory.commands import Get, MemoryExport, Search
from actormem.actors.memory.store import MessageStore
from actormem.actors.messages import Message
from actormem.actors.text.ranker import Ranker

__all__ = ("DEFAULT_SEARCH_K", "MessageQueries")

#: Results a ranked search returns when the caller gives no ``k``.
DEFAULT_SEARCH_K = 10
#: The slot of the standing index of the last ranked search filtered by roles.
_FILTERED = "filtered"


class MessageQueries:
    """Answers the reads of a store (``Get``, ``Search``, ``Reload``, ``Export``),
    keeping a standing ranked index of the working view, one of the history, one
    of the offloaded blocks, and one for the last ranked search filtered by roles.

    Each index follows its list as messages are appended to it. The history's is
    only built again when the history is replaced (wiped, restored), never when the
    working view is rewritten (compression, delete, prune, update): that is what
    a search of a long history would otherwise pay after each compression.

    Args:
        store: the messages searched.
        important_threshold: the importance at or above which a message is important.
    """

    __slots__ = ("_important_threshold", "_ranked", "_store")

    def __init__(self, store: MessageStore, important_threshold: float) -> None:
        self._store = store
        self._important_threshold = important_threshold
        self._ranked: dict[str, _RankedIndex] = {}

    def drop_indexes(self) -> None:
        """Let go of the ranked indexes (the words of wiped messages go with them)."""
        self._ranked.clear()

    def get(self, q: Get) -> list[Message]:
        """The messages of ``q.scope`` that pass every filter ``q`` sets, oldest first.

        Raises:
            MemoryInputError: a negative ``recent_n`` or an unknown scope.
        """
        if q.recent_n is not None and q.recent_n < 0:
            raise MemoryInputError(f"recent_n must be >= 0, got {q.recent_n}")
        tests: list[Callable[[Message], bool]] = []
        if q.roles is not None:
            roles = set(q.roles)
            tests.append(lambda m: m.role in roles)
        if q.names is not None:
            names = set(q.names)
            tests.append(lambda m: m.name in names)
        if q.metadata:
            wanted = q.metadata.items()
            tests.append(lambda m: all(m.metadata.get(k) == v for k, v in wanted))
        if q.since is not None:
            since = q.since
            tests.append(lambda m: m.timestamp >= since)
        if q.until is not None:
            until = q.until
            tests.append(lambda m: m.timestamp < until)
        if q.important:
            threshold = self._important_threshold
            tests.append(
                lambda m: (
                    bool(m.metadata.get("important"))
                    or (m.importance is not None and m.importance >= threshold)
                )
            )
        source = self._store.source(q.scope)
        found = [m for m in source if all(t(m) for t in tests)] if tests else list(source)
        if q.recent_n is not None:
            found = found[max(0, len(found) - q.recent_n) :] if q.recent_n else []
        return found

    def search(self, q: Search) -> list[Message]:
        """The messages of ``q.scope`` matching ``q.query``: the newest substring
        hits, or the best ranked ones (see :mod:`actormem.actors.text.ranker`).

        Raises:
            MemoryInputError: an empty query, ``k`` below 1, an unknown mode or scope.
        """
        query = q.query.strip()
        if not query:
            raise MemoryInputError("search needs a non-empty query")
        if q.k is not None and q.k < 1:
            raise MemoryInputError(f"search: k must be >= 1, got {q.k}")
        source = self._store.source(q.scope)
        roles = None if q.roles is None else frozenset(q.roles)
        if roles is not None:
            source = [m for m in source if m.role in roles]
        if q.mode == "substring":
            needle = query.casefold()
            hits = [m for m in source if needle in m.searchable_text().casefold()]
            return hits[-q.k :] if q.k is not None else hits
        if q.mode != "ranked":
            raise MemoryInputError(f"search mode must be 'substring' or 'ranked', got {q.mode!r}")
        index = self._index(q.scope, roles, source)
        return [source[i] for i, _ in index.top(query, q.k or DEFAULT_SEARCH_K)]

    def export(self, agent: str, include_history: bool) -> MemoryExport:
        """Return the messages as an export ``load`` reads."""
        return MemoryExport(
            agent=agent,
            working=list(self._store.working),
            history=list(self._store.history) if include_history else [],
            offloaded={k: list(v) for k, v in self._store.offloaded.items()},
            exported_at=time.time(),
        )

    def reload(self, offload_id: str) -> list[Message]:
        """Return the offloaded block ``offload_id``.

        Raises:
            MemoryInputError: no block has that id.
        """
        found = self._store.offloaded.get(offload_id)
        if found is None:
            raise MemoryInputError(f"reload: no offloaded content with id {offload_id!r}")
        return list(found)

    def _index(self, scope: str, roles: frozenset[str] | None, source: list[Message]) -> Ranker:
        """The index of ``source``, the messages of ``scope`` (of ``roles`` only, when
        given): the standing one brought up to date, else one built afresh."""
        store = self._store
        blocks: list[tuple[list[Message], int]] = []
        followed: object
        if scope == "history":
            followed, version = store.history, 0
        elif scope == "working":
            followed, version = store.working, store.version
        else:
            # Offloaded blocks are added (compression) or replaced by other lists
            # (load): the index follows them while its blocks are still the first
            # ones, the same lists of the same lengths.
            followed, version = store.offloaded, 0
            blocks = [(block, len(block)) for block in store.offloaded.values()]
        # The history is append-only until it is replaced by another list; the
        # working view is also rewritten in place of a list (its version moves).
        key = (id(followed), version, roles)
        # One index per scope, and one for the last search filtered by roles.
        slot = scope if roles is None else _FILTERED
        cached = self._ranked.get(slot)
        if cached is not None and cached.key == key and cached.extends(source, blocks):
            cached.catch_up(source, blocks)
            return cached.ranker
        self._ranked[slot] = fresh = _RankedIndex(key, source, blocks)
        return fresh.ranker


def _ranker(messages: list[Message]) -> Ranker:
    ranker = Ranker()
    for m in messages:
        ranker.add(ranked_text(m), m.name, m.timestamp)
    return ranker


def ranked_text(message: Message) -> str:
    """What ranked search matches in a message: its text and its tool calls (its
    speaker is a field of its own)."""
    pieces = [message.text()]
    for call in message.tool_calls:
        pieces.append(call.name)
        pieces.append(call.arguments)
    return "\n".join(pieces)


class _RankedIndex:
    """The ranked index of one scope's message list, kept up to date as it grows.

    ``blocks`` (the offloaded scope): the lists the messages came from, with their
    lengths then, held so that none of them is taken for another list later.
    """

    __slots__ = ("blocks", "count", "key", "last_id", "ranker")

    def __init__(
        self,
        key: tuple[int, int, frozenset[str] | None],
        source: list[Message],
        blocks: list[tuple[list[Message], int]],
    ) -> None:
        self.key = key
        self.ranker = _ranker(source)
        self.count = len(source)
        self.last_id = source[-1].id if source else ""
        self.blocks = blocks

    def extends(self, source: list[Message], blocks: list[tuple[list[Message], int]]) -> bool:
        """True when ``source`` is the indexed list with messages appended (and, for
        blocks, the indexed blocks, unchanged, come first)."""
        n = self.count
        if not (len(source) >= n and (n == 0 or source[n - 1].id == self.last_id)):
            return False
        held = self.blocks
        return len(blocks) >= len(held) and all(
            now is then and size == length
            for (now, size), (then, length) in zip(blocks, held, strict=False)
        )

    def catch_up(self, source: list[Message], blocks: list[tuple[list[Message], int]]) -> None:
        for m in source[self.count :]:
            self.ranker.add(ranked_text(m), m.name, m.timestamp)
        self.count = len(source)
        self.last_id = source[-1].id if source else ""
        self.blocks = blocks
