"""Ranked feeds: what each subscriber receives per tick, instead of every insight.

With ``[pool] delivery = "feed"``, a new insight is not sent to anyone at once. It
becomes a *candidate* for ``window`` ticks. At each tick every subscriber gets at
most ``size`` candidates it has not had, on topics it receives, the best by the
score of :class:`~actormem.actors.pool.config.FeedConfig`. So the deliveries of a
tick grow with the subscribers, not with subscribers times insights.

Scoring every candidate for every subscriber would cost that product again. Each
subscriber's candidates are instead drawn from four short lists: the insights of
the agents it follows, those that share its rarest recent terms, the most shared
ones of the window and the newest ones. Each list is bounded, so a tick costs a
bounded amount per subscriber however many insights were shared.

The insights shared between two ticks join the lists at the next tick, in an
order of their own (by source and text), not in the order they arrived: agents
that share at once arrive in any order, and the same run must rank the same.

What the feeds know of an agent (the terms it uses, whom it follows) is kept in
memory only: a restarted pool ranks without it until the agents' next
confirmations. What each agent was sent is replayed from the pool's journal; one
sent before the journal's last snapshot may be sent a second time (a memory keeps
one copy per insight).
"""

from __future__ import annotations

import heapq
import math
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import Final

from actormem.actors.pool.config import FeedConfig
from actormem.actors.pool.insights import Insight
from actormem.actors.text.terms import index_terms

__all__ = ("FEED_TERMS", "Feeds")

#: Terms of an agent's recent messages kept as its interest.
FEED_TERMS: Final = 32
#: Candidates taken from each list (per followed agent, per term, and the window's
#: most shared and newest).
_PER_LIST: Final = 8
#: A term's newest insights kept in its index.
_PER_TERM: Final = 64
#: Terms of an agent's interest looked up per tick (its rarest).
_TERMS_LOOKED_UP: Final = 6
#: Agents an agent follows whose newest insights are looked up per tick, and how many
#: of each one's.
_SOURCES_LOOKED_UP: Final = 16
_PER_SOURCE: Final = 4
#: Insight ids remembered per agent as already sent.
_SEEN_KEPT: Final = 2_000


class _Candidate:
    """An insight while it may be fed: when it came, how often it was shared, its terms,
    and the part of its score that is the same for every agent this tick."""

    __slots__ = ("base", "insight", "order", "shares", "terms", "tick")

    def __init__(self, insight: Insight, tick: int) -> None:
        self.insight = insight
        self.tick = tick
        self.shares = 1
        self.terms = frozenset(index_terms(insight.text))
        self.base = 0.0
        # Its place among the insights of its tick: the same whatever order they came in.
        self.order = (zlib.crc32(f"{insight.source}\x00{insight.text}".encode()), insight.id)


class _Reader:
    """What the feeds know of one subscriber."""

    __slots__ = ("follows", "interest", "seen", "seen_order", "talks_to")

    def __init__(self) -> None:
        self.interest: frozenset[str] = frozenset()
        self.follows: frozenset[str] = frozenset()
        self.talks_to: frozenset[str] = frozenset()
        self.seen: set[str] = set()
        self.seen_order: deque[str] = deque()

    def saw(self, key: str) -> None:
        self.seen.add(key)
        self.seen_order.append(key)
        if len(self.seen_order) > _SEEN_KEPT:
            self.seen.discard(self.seen_order.popleft())


class Feeds:
    """The candidates of one pool partition and its subscribers' feeds.

    Args:
        config: the feed's size, window and weights.

    Attributes:
        tick: ticks so far.
    """

    __slots__ = (
        "_by_source",
        "_by_term",
        "_candidates",
        "_config",
        "_fresh",
        "_order",
        "_readers",
        "tick",
    )

    def __init__(self, config: FeedConfig) -> None:
        self._config = config
        self._candidates: dict[str, _Candidate] = {}
        # Candidate ids oldest first; per source; per term (its newest only).
        self._order: deque[str] = deque()
        self._by_source: dict[str, deque[str]] = {}
        self._by_term: dict[str, deque[str]] = {}
        self._readers: dict[str, _Reader] = {}
        # Shared since the last tick: listed at the next one.
        self._fresh: list[_Candidate] = []
        self.tick = 0

    def __len__(self) -> int:
        return len(self._candidates)

    # -- what comes in ------------------------------------------------------------------

    def add(self, insight: Insight) -> None:
        """Make a new insight a candidate from now on."""
        key = insight.id
        if key in self._candidates or insight.erased:
            return
        candidate = self._candidates[key] = _Candidate(insight, self.tick)
        self._fresh.append(candidate)

    def _list(self) -> None:
        """List the insights shared since the last tick, in their own order."""
        fresh, self._fresh = self._fresh, []
        fresh.sort(key=lambda c: c.order)
        for candidate in fresh:
            key = candidate.insight.id
            if key not in self._candidates:
                continue  # forgotten meanwhile
            self._order.append(key)
            self._by_source.setdefault(candidate.insight.source, deque()).append(key)
            for term in candidate.terms:
                listed = self._by_term.get(term)
                if listed is None:
                    listed = self._by_term[term] = deque(maxlen=_PER_TERM)
                listed.append(key)

    def shared_again(self, key: str) -> None:
        """Count another share of the insight ``key`` (a duplicate of it)."""
        candidate = self._candidates.get(key)
        if candidate is not None:
            candidate.shares += 1

    def follow(self, agent: str, follows: Iterable[str]) -> None:
        """Rank the insights of ``follows`` higher in ``agent``'s feed."""
        self._reader(agent).follows = frozenset(follows) - {agent}

    def interest(self, agent: str, terms: Iterable[str], talks_to: Iterable[str]) -> None:
        """What ``agent``'s recent messages said (terms) and whom they named."""
        reader = self._reader(agent)
        reader.interest = frozenset(list(terms)[:FEED_TERMS])
        reader.talks_to = frozenset(talks_to) - {agent}

    def sent(self, agent: str, keys: Iterable[str]) -> None:
        """Note that ``agent`` had the insights ``keys`` (a restored pool's feeds)."""
        reader = self._reader(agent)
        for key in keys:
            reader.saw(key)

    def forget(self, source: str) -> None:
        """Drop ``source``'s insights from the candidates and what is known of it."""
        self._readers.pop(source, None)
        for key in self._by_source.pop(source, ()):
            self._candidates.pop(key, None)
        for candidate in self._fresh:
            if candidate.insight.source == source:
                self._candidates.pop(candidate.insight.id, None)

    def _reader(self, agent: str) -> _Reader:
        reader = self._readers.get(agent)
        if reader is None:
            reader = self._readers[agent] = _Reader()
        return reader

    # -- a tick -------------------------------------------------------------------------

    def feed(
        self, agents: Iterable[str], accepts: Callable[[str], Callable[[str], bool] | None]
    ) -> list[tuple[str, list[Insight]]]:
        """Move to the next tick and return each agent's feed (agents with none left out).

        Args:
            agents: the subscribers, in a stable order.
            accepts: an agent's topic filter (None: it receives every topic).
        """
        self._list()
        self.tick += 1
        self._expire()
        if not self._candidates:
            return []
        cfg = self._config
        candidates = self._candidates
        newest = [candidates[k] for k in _newest(self._order, _PER_LIST)]
        shared = [c for c in candidates.values() if c.shares > 1]
        popular = heapq.nlargest(_PER_LIST, shared, key=lambda c: (c.shares, c.tick, c.order))
        most = max((c.shares for c in popular), default=1)
        log_most = math.log(most) if most > 1 else 0.0
        now = self.tick - 1
        for c in candidates.values():  # recency and popularity: the same for everyone
            recency = 0.5 ** ((now - c.tick) / cfg.half_life)
            popularity = math.log(c.shares) / log_most if log_most else 0.0
            c.base = cfg.recency * recency + cfg.popularity * popularity
        common = newest + popular
        out = []
        for agent in agents:
            chosen = self._choose(agent, common, accepts)
            if chosen:
                out.append((agent, chosen))
        return out

    def _expire(self) -> None:
        oldest = self.tick - self._config.window
        order = self._order
        candidates = self._candidates
        while order:
            candidate = candidates.get(order[0])
            if candidate is not None and candidate.tick >= oldest:
                break
            key = order.popleft()
            if candidate is None:
                continue  # forgotten already
            del candidates[key]
            listed = self._by_source.get(candidate.insight.source)
            if listed is not None:
                while listed and listed[0] not in candidates:
                    listed.popleft()
                if not listed:
                    del self._by_source[candidate.insight.source]
            for term in candidate.terms:
                terms = self._by_term.get(term)
                if terms is not None and all(k not in candidates for k in terms):
                    del self._by_term[term]

    def _choose(
        self,
        agent: str,
        common: list[_Candidate],
        accepts: Callable[[str], Callable[[str], bool] | None],
    ) -> list[Insight]:
        cfg = self._config
        candidates = self._candidates
        reader = self._readers.get(agent) or _Reader()
        seen = reader.seen
        follows = reader.follows | reader.talks_to
        wants = accepts(agent)
        pool: dict[str, _Candidate] = {c.insight.id: c for c in common}
        by_source = self._by_source
        for source in islice((s for s in follows if s in by_source), _SOURCES_LOOKED_UP):
            listed = by_source[source]
            if listed:
                for key in _newest(listed, _PER_SOURCE):
                    c = candidates.get(key)
                    if c is not None:
                        pool[key] = c
        interest = reader.interest
        if interest:
            by_term = self._by_term
            rare = sorted((t for t in interest if t in by_term), key=lambda t: len(by_term[t]))
            for term in rare[:_TERMS_LOOKED_UP]:
                for key in _newest(by_term[term], _PER_LIST):
                    c = candidates.get(key)
                    if c is not None:
                        pool[key] = c
        relevance, social = cfg.relevance, cfg.social
        scored = []
        for key, c in pool.items():
            insight = c.insight
            if key in seen or insight.source == agent:
                continue
            if wants is not None and not wants(insight.topic):
                continue
            score = c.base
            terms = c.terms
            if interest and terms:
                score += relevance * len(interest & terms) / len(terms)
            if insight.source in follows:
                score += social
            scored.append((score, c.tick, c.order, insight))
        best = heapq.nlargest(cfg.size, scored)
        reader = self._reader(agent)
        for _, _, _, insight in best:
            reader.saw(insight.id)
        return [s[3] for s in best]


def _newest(keys: deque[str], n: int) -> Iterator[str]:
    """The newest ``n`` of ``keys`` (kept oldest first)."""
    return islice(reversed(keys), n)
