"""Keyed long-term entries: JSON values an agent keeps under (namespace, key).

Beside the memories :class:`~actormem.actors.recall.longterm.LongTermMemory`
records from the conversation, an agent's long-term memory holds entries that
its code puts, gets, deletes and searches by name, as a key-value store does
(LangGraph's ``BaseStore`` is built on them). An entry is a JSON object under a
namespace (a tuple of labels) and a key; a put under the same namespace and key
replaces it. Each entry has a text, the words a ranked search matches: given
with the put, or else made from the value's strings.

A search within a namespace prefix ranks by the long-term memory's own score (a
weighted sum of recency, importance and BM25 relevance, each normalised, with
the ``[longterm]`` weights); without a query it lists the newest first.

An entry may have a time to live: it expires that many seconds after it was
last written (or read, when the read refreshes it). An expired entry is never
returned, and it is dropped from the state on the next keyed command and from
every snapshot. Entries go with the rest of the agent's memory: ``clear(history=True)``
and ``forget()`` erase them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from actormem.actors.errors import MemoryInputError
from actormem.actors.recall.keyed_checks import (
    MAX_KEY_CHARS,
    MAX_LABEL_CHARS,
    MAX_NAMESPACE_DEPTH,
    MAX_VALUE_BYTES,
    check_key,
    check_limit,
    check_namespace,
    check_ttl,
    check_value,
    shown,
)
from actormem.actors.recall.keyed_filters import matches_filter, namespace_matches, value_text
from actormem.actors.recall.longterm import LongTermConfig
from actormem.actors.recall.ranking import score_components
from actormem.actors.text.bm25 import BM25, tokenize
from actormem.runtime.state import SnapshotState

__all__ = (
    "MAX_KEY_CHARS",
    "MAX_LABEL_CHARS",
    "MAX_NAMESPACE_DEPTH",
    "MAX_VALUE_BYTES",
    "FoundEntry",
    "KeyedEntries",
    "KeyedEntry",
    "KeyedState",
    "matches_filter",
)


class KeyedEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One keyed long-term entry.

    Attributes:
        namespace: its namespace (one label at least).
        key: its key within the namespace.
        value: the JSON object stored.
        text: what a ranked search matches.
        importance: 0..1, for the ranking.
        created: when it was first put (seconds since the epoch).
        updated: when it was last put.
        ttl: seconds it lives after its last write or refreshing read (None: for ever).
        expires: when it expires (None: never).
    """

    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    text: str
    importance: float
    created: float
    updated: float
    ttl: float | None = None
    expires: float | None = None


class FoundEntry(msgspec.Struct, frozen=True, kw_only=True):
    """An entry a search found, with its score (None when the search had no query)."""

    entry: KeyedEntry
    score: float | None = None


class KeyedState(msgspec.Struct, frozen=True, kw_only=True):
    """What :class:`KeyedEntries` saves (in the memory's snapshot and session file)."""

    version: int = 1
    entries: list[KeyedEntry] = msgspec.field(default_factory=list)
    accessed: dict[str, float] = msgspec.field(default_factory=dict)


# -- the entries ---------------------------------------------------------------------------


class KeyedEntries(SnapshotState[KeyedState]):
    """One agent's keyed long-term entries (owned by its memory actor; not thread-safe).

    Args:
        config: the long-term section: its weights and decay rank a search, its
            ``max_entries`` bounds the entries, ``max_entry_chars`` their text,
            ``default_importance`` is an entry's importance unless given.
        clock: the time source (tests pass a fake one).
    """

    state_type = KeyedState

    def __init__(
        self, config: LongTermConfig | None = None, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.config = config or LongTermConfig()
        self.clock = clock
        self._entries: dict[tuple[tuple[str, ...], str], KeyedEntry] = {}
        # When each entry was last read or written: its recency in a ranked search.
        self._accessed: dict[tuple[tuple[str, ...], str], float] = {}
        #: Moves on every change of what :meth:`export_state` keeps (the owner
        #: re-encodes the state only when it moved).
        self.changes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def put(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: dict[str, Any],
        text: str | None = None,
        importance: float | None = None,
        ttl: float | None = None,
    ) -> KeyedEntry:
        """Store ``value`` under (namespace, key), replacing what was there; return the entry.

        Args:
            namespace: its namespace.
            key: its key.
            value: a JSON object.
            text: what a ranked search matches (by default the value's strings).
            importance: 0..1 (by default ``default_importance``).
            ttl: seconds it lives after its last write or refreshing read (None: for ever).

        Raises:
            MemoryInputError: any argument is invalid, or the memory holds
                ``max_entries`` entries already; nothing is changed then.
        """
        check_namespace(namespace)
        check_key(key)
        check_value(value)
        cfg = self.config
        if text is None:
            text = value_text(value)[: cfg.max_entry_chars]
        elif not isinstance(text, str) or len(text) > cfg.max_entry_chars:
            raise MemoryInputError(
                f"text must be a string of at most {cfg.max_entry_chars} characters, "
                f"got {shown(text)}"
            )
        if importance is None:
            importance = cfg.default_importance
        elif (
            not isinstance(importance, int | float)
            or isinstance(importance, bool)
            or not 0.0 <= importance <= 1.0
        ):
            raise MemoryInputError(f"importance must be within 0..1, got {shown(importance)}")
        check_ttl(ttl)
        now = self.clock()
        self.purge_expired(now)
        where = (tuple(namespace), key)
        old = self._entries.get(where)
        if old is None and len(self._entries) >= cfg.max_entries:
            raise MemoryInputError(
                f"the agent holds {len(self._entries)} keyed entries, the most "
                "[longterm] max_entries allows: delete some first"
            )
        entry = KeyedEntry(
            namespace=where[0],
            key=key,
            value=value,
            text=text,
            importance=float(importance),
            created=now if old is None else old.created,
            updated=now,
            ttl=ttl,
            expires=None if ttl is None else now + ttl,
        )
        self.changes += 1
        self._entries[where] = entry
        self._accessed[where] = now
        return entry

    def get(
        self, namespace: tuple[str, ...], key: str, refresh_ttl: bool = True
    ) -> KeyedEntry | None:
        """The entry under (namespace, key), or None; ``refresh_ttl`` restarts its time to live.

        Raises:
            MemoryInputError: the namespace or key is invalid.
        """
        check_namespace(namespace)
        check_key(key)
        now = self.clock()
        self.purge_expired(now)
        where = (tuple(namespace), key)
        entry = self._entries.get(where)
        if entry is None:
            return None
        self.changes += 1
        self._accessed[where] = now
        return self._refreshed(where, entry, now) if refresh_ttl else entry

    def delete(self, namespace: tuple[str, ...], key: str) -> bool:
        """Delete the entry under (namespace, key); return False when there was none.

        Raises:
            MemoryInputError: the namespace or key is invalid.
        """
        check_namespace(namespace)
        check_key(key)
        self.purge_expired(self.clock())
        where = (tuple(namespace), key)
        self.changes += 1
        self._accessed.pop(where, None)
        return self._entries.pop(where, None) is not None

    def search(
        self,
        prefix: tuple[str, ...] = (),
        query: str | None = None,
        filter: Mapping[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        refresh_ttl: bool = True,
    ) -> list[FoundEntry]:
        """Entries whose namespace starts with ``prefix`` and whose value meets
        ``filter`` (see :func:`matches_filter`): ranked for ``query`` by the long-term
        score, best first, or, without a query, the most recently written first.
        ``limit`` and ``offset`` page through them; ``refresh_ttl`` restarts the time
        to live of those returned.

        With a query that has words and ``require_relevance`` set, only entries whose
        text shares a word with it are found.

        Raises:
            MemoryInputError: an invalid prefix, filter, query, limit or offset.
        """
        check_namespace(prefix, "namespace prefix", empty=True)
        if filter is not None and not isinstance(filter, Mapping):
            raise MemoryInputError(f"filter must be a dict, got {shown(filter)}")
        if query is not None and not isinstance(query, str):
            raise MemoryInputError(f"query must be text, got {shown(query)}")
        check_limit(limit, offset)
        now = self.clock()
        self.purge_expired(now)
        prefix = tuple(prefix)
        candidates = [
            (where, e)
            for where, e in self._entries.items()
            if namespace_matches(e.namespace, prefix, suffix=False)
            and (not filter or matches_filter(e.value, filter))
        ]
        if query is not None and query.strip():
            found = self._ranked(candidates, query, now)
        else:
            # Newest first; of entries written at the same time, the last one put.
            newest = sorted(reversed(candidates), key=lambda c: c[1].updated, reverse=True)
            found = [(where, e, None) for where, e in newest]
        out = []
        for where, entry, score in found[offset : offset + limit]:
            self.changes += 1
            self._accessed[where] = now
            if refresh_ttl:
                entry = self._refreshed(where, entry, now)
            out.append(FoundEntry(entry=entry, score=score))
        return out

    def _ranked(
        self,
        candidates: list[tuple[tuple[tuple[str, ...], str], KeyedEntry]],
        query: str,
        now: float,
    ) -> list[tuple[tuple[tuple[str, ...], str], KeyedEntry, float | None]]:
        cfg = self.config
        relevance = BM25([e.text for _, e in candidates]).scores(query)
        if cfg.require_relevance and tokenize(query):
            kept = [n for n, score in enumerate(relevance) if score > 0]
            candidates = [candidates[n] for n in kept]
            relevance = [relevance[n] for n in kept]
        if not candidates:
            return []
        components = score_components(
            [max(0.0, now - self._accessed[w]) / cfg.recency_unit_seconds for w, _ in candidates],
            [e.importance for _, e in candidates],
            relevance,
            cfg.recency_decay,
        )
        scored = [
            (
                where,
                entry,
                cfg.recency_weight * rc + cfg.importance_weight * im + cfg.relevance_weight * rl,
            )
            for (where, entry), (rc, im, rl) in zip(candidates, components, strict=True)
        ]
        scored.sort(key=lambda s: (-s[2], -s[1].updated))
        return [(w, e, s) for w, e, s in scored]

    def namespaces(
        self,
        prefix: tuple[str, ...] = (),
        suffix: tuple[str, ...] = (),
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[tuple[str, ...]]:
        """The distinct namespaces of the entries, sorted, that start with ``prefix``
        and end with ``suffix`` (a ``*`` label matches any label), cut to
        ``max_depth`` labels when given.

        Raises:
            MemoryInputError: an invalid prefix, suffix, depth, limit or offset.
        """
        check_namespace(prefix, "namespace prefix", empty=True)
        check_namespace(suffix, "namespace suffix", empty=True)
        if max_depth is not None and (
            not isinstance(max_depth, int) or isinstance(max_depth, bool) or max_depth < 1
        ):
            raise MemoryInputError(f"max_depth must be an int >= 1 or None, got {shown(max_depth)}")
        check_limit(limit, offset)
        self.purge_expired(self.clock())
        found = {
            e.namespace[:max_depth] if max_depth is not None else e.namespace
            for e in self._entries.values()
            if namespace_matches(e.namespace, tuple(prefix), suffix=False)
            and namespace_matches(e.namespace, tuple(suffix), suffix=True)
        }
        return sorted(found)[offset : offset + limit]

    def purge_expired(self, now: float | None = None) -> int:
        """Drop the entries whose time to live ran out; return how many went."""
        now = self.clock() if now is None else now
        gone = [w for w, e in self._entries.items() if e.expires is not None and e.expires <= now]
        for where in gone:
            self.changes += 1
            del self._entries[where]
            self._accessed.pop(where, None)
        return len(gone)

    def _refreshed(
        self, where: tuple[tuple[str, ...], str], entry: KeyedEntry, now: float
    ) -> KeyedEntry:
        if entry.ttl is None:
            return entry
        entry = msgspec.structs.replace(entry, expires=now + entry.ttl)
        self.changes += 1
        self._entries[where] = entry
        return entry

    def clear(self) -> None:
        """Forget every entry."""
        self.changes += 1
        self._entries.clear()
        self._accessed.clear()

    # -- state ---------------------------------------------------------------------------

    def export_state(self) -> KeyedState:
        """The entries not expired, as a serialisable state."""
        now = self.clock()
        live = [e for e in self._entries.values() if e.expires is None or e.expires > now]
        return KeyedState(
            entries=live,
            accessed={
                _state_key(e): self._accessed.get((e.namespace, e.key), e.updated) for e in live
            },
        )

    def load_state(self, state: KeyedState) -> None:
        """Replace the entries with ``state``'s."""
        self.clear()
        for e in state.entries:
            where = (tuple(e.namespace), e.key)
            self._entries[where] = e
            self._accessed[where] = state.accessed.get(_state_key(e), e.updated)


def _state_key(entry: KeyedEntry) -> str:
    """One string naming an entry's (namespace, key), for the saved ``accessed`` map."""
    return msgspec.json.encode([*entry.namespace, entry.key]).decode()
