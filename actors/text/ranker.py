"""The ranked retrieval of an agent's memory (ranked ``search()`` and ``retrieve()``).

Offline and general: no model, nothing tuned to one data set. A query is scored
against each document in five steps:

1. **Terms.** BM25 over stemmed words without stop words (:mod:`.terms`).
2. **Speakers.** A query word that names a speaker of the memory is not matched
   as a word (every message of that speaker would match it); the speaker's own
   messages get a bonus instead (``speaker_boost``).
3. **Time.** A question asking *when* favours messages that place something in
   time ("yesterday", "last May", "2019"; ``when_boost``); a query naming a month
   or a year matches the date each message was said.
4. **Feedback.** The best first-pass documents lend their most telling other
   words to the query (pseudo-relevance feedback, as in RM3): ``feedback_docs``
   documents, ``feedback_terms`` words, each weighted by ``feedback_weight``
   times its share of the feedback.
5. **Neighbours.** A turn of a conversation is read in it: it gains
   ``neighbour_weight`` times the best score of the turns just before and after
   it (divided by the distance, up to ``neighbour_window`` turns away): an answer
   often holds none of the question's words, its question does.

Documents are appended in the order they were said; removing one leaves its
slot empty (it scores nothing and is no one's neighbour).
"""

from __future__ import annotations

import heapq
import math
import operator
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Final

import msgspec

from actormem.actors.text.bm25 import COMMON_WORD_MIN_DOCS, tokenize
from actormem.actors.text.terms import (
    MONTHS,
    asks_when,
    date_terms,
    index_terms,
    mentions_time,
    terms_of,
)

__all__ = ("Ranker", "RankerConfig")

#: How many speakers' indexed names a ranker keeps; past this many it starts again.
_SPEAKERS_KEPT: Final = 1024

#: In an index of ``COMMON_WORD_MIN_DOCS`` documents or more, a word held by more
#: than this share of them is not scored: it weighs little and costs the most.
COMMON_SHARE: Final = 0.5
#: A word held by more than this share of the documents is not a feedback word.
FEEDBACK_MAX_SHARE: Final = 0.05
K1: Final = 0.9
B: Final = 0.4
_MONTH_SET: Final = frozenset(MONTHS)
#: The prefix of the terms of the speaker field (no word starts with it).
_SPEAKER: Final = "@"


class RankerConfig(msgspec.Struct, frozen=True, kw_only=True):
    """How :class:`Ranker` scores (see the module doc for each step).

    Attributes:
        speaker_boost: the bonus of what a speaker the query names said.
        when_boost: the bonus of a message placing something in time, for a
            question asking when.
        date_weight: the bonus of a message said in a month or year the query names.
        feedback_docs: the best first-pass documents feedback words come from.
        feedback_terms: the feedback words added to the query.
        feedback_weight: what a feedback word weighs on average (a query word: 1).
        neighbour_weight: the share of a turn's score its neighbours gain.
        neighbour_window: how many turns away a neighbour may be.
        candidates: the best documents the bonuses and neighbours apply to.
        k1, b: BM25's term frequency saturation and length normalisation.
    """

    speaker_boost: float = 1.0
    when_boost: float = 0.3
    date_weight: float = 0.5
    feedback_docs: int = 5
    feedback_terms: int = 8
    feedback_weight: float = 0.3
    neighbour_weight: float = 0.5
    neighbour_window: int = 2
    candidates: int = 100
    k1: float = K1
    b: float = B


class Ranker:
    """A ranked index over documents said in order.

    Args:
        config: the scoring parameters.
    """

    def __init__(self, config: RankerConfig | None = None) -> None:
        self.config = config or RankerConfig()
        # Per term, the documents holding it and its count in each, as one flat
        # array (document, count, document, count...): a third of a dict's size,
        # and nothing for the collector to track.
        self._postings: dict[str, array[int]] = {}
        self._lengths: list[int] = []
        # Each document's terms, each as many times as it holds it, in order.
        self._terms: list[tuple[str, ...]] = []
        self._speakers: list[str] = []
        self._dates: list[tuple[str, ...]] = []
        self._timely: list[bool] = []
        self._turns: list[bool] = []
        self._speaker_docs: Counter[str] = Counter()
        # Each speaker's name as the words it is indexed by.
        self._who: dict[str, str] = {}
        self._total = 0
        self._live = 0

    def __len__(self) -> int:
        return len(self._lengths)

    def add(
        self, text: str, speaker: str | None = None, said: float | None = None, turn: bool = True
    ) -> int:
        """Append a document; return its index.

        Args:
            text: what it says.
            speaker: who said it.
            said: when (seconds since the epoch).
            turn: it is a turn of a conversation, read with the turns around it (a
                note standing on its own is not).
        """
        index = len(self._lengths)
        self._turns.append(turn)
        words = tokenize(text)
        counts = Counter(terms_of(words))
        postings = self._postings
        for term, freq in counts.items():
            docs = postings.get(term)
            if docs is None:
                postings[term] = array("I", (index, freq))
            else:
                docs.extend((index, freq))
        length = sum(counts.values())
        self._lengths.append(length)
        self._terms.append(tuple(counts.elements()))
        who = self._who.get(speaker or "")
        if who is None:
            if len(self._who) >= _SPEAKERS_KEPT:
                self._who.clear()
            who = self._who[speaker or ""] = " ".join(tokenize(speaker or ""))
        self._speakers.append(who)
        if who:
            self._speaker_docs[who] += 1
            for part in set(who.split()):  # a field term: a query of names only matches it
                self._post(_SPEAKER + part, index, 1)
        self._dates.append(date_terms(said) if said is not None else ())
        self._timely.append(mentions_time(words))
        self._total += length
        self._live += 1
        return index

    def remove(self, index: int) -> None:
        """Empty slot ``index``: it scores nothing from now on."""
        counts = self._terms[index]
        if self._lengths[index] < 0:
            return
        for term in dict.fromkeys(counts):
            self._unpost(term, index)
        who = self._speakers[index]
        if who:
            self._speaker_docs[who] -= 1
            if not self._speaker_docs[who]:
                del self._speaker_docs[who]
                self._who = {k: v for k, v in self._who.items() if v != who}
            for part in set(who.split()):
                self._unpost(_SPEAKER + part, index)
        self._total -= self._lengths[index]
        self._lengths[index] = -1
        # Nothing of what the document said stays behind (erasure is real).
        self._terms[index] = ()
        self._speakers[index] = ""
        self._live -= 1

    def _post(self, term: str, index: int, freq: int) -> None:
        docs = self._postings.get(term)
        if docs is None:
            self._postings[term] = array("I", (index, freq))
        else:
            docs.extend((index, freq))

    def _unpost(self, term: str, index: int) -> None:
        docs = self._postings.get(term)
        if docs is None:
            return
        for k in range(0, len(docs), 2):
            if docs[k] == index:
                del docs[k : k + 2]
                break
        if not docs:
            del self._postings[term]

    def _docs(self, term: str) -> Iterator[tuple[int, int]]:
        """The documents holding ``term``, each with its count there."""
        docs = self._postings.get(term, ())
        pairs = iter(docs)
        return zip(pairs, pairs, strict=True)

    def _held_by(self, term: str) -> int:
        """How many documents hold ``term``."""
        return len(self._postings.get(term, ())) // 2

    # -- scoring ----------------------------------------------------------------------

    def _idf(self, term: str) -> float:
        held = self._held_by(term)
        if not held:
            return 0.0
        n = self._live
        return math.log(1 + (n - held + 0.5) / (held + 0.5))

    def _bm25(
        self, weighted: dict[str, float], out: dict[int, float] | None = None
    ) -> dict[int, float]:
        """BM25 scores of ``weighted`` terms, added to ``out`` when given."""
        out = {} if out is None else out
        if not self._total:
            return out
        n = self._live
        avg = self._total / max(1, n)
        lengths = self._lengths
        k1, b = self.config.k1, self.config.b
        fixed, per_word = k1 * (1 - b), k1 * b / avg
        get = out.get
        postings = self._postings
        for term, weight in weighted.items():
            docs = postings.get(term)
            if not docs or (n >= COMMON_WORD_MIN_DOCS and len(docs) > 2 * COMMON_SHARE * n):
                continue  # a word in most documents weighs next to nothing, and costs most
            held = len(docs) // 2
            gain = math.log(1 + (n - held + 0.5) / (held + 0.5)) * weight * (k1 + 1)
            pairs = iter(docs)
            if not out:  # the first word reached: nothing to add to (0.0 + x is x)
                out.update(
                    {
                        i: gain * f / (f + fixed + per_word * lengths[i])
                        for i, f in zip(pairs, pairs, strict=True)
                    }
                )
                continue
            for i, f in zip(pairs, pairs, strict=True):
                out[i] = get(i, 0.0) + gain * f / (f + fixed + per_word * lengths[i])
        return out

    def _query(self, query: str) -> tuple[dict[str, float], set[str], bool, set[str]]:
        """The weighted terms of ``query``, the speakers it names,
        whether it asks when, and the month and year names it holds."""
        # "Caroline's" names Caroline.
        words = [w[:-2] if w.endswith(("'s", "\u2019s")) else w for w in tokenize(query)]
        named: set[str] = set()
        names = set()
        said = set(words)
        for who in self._speaker_docs:
            parts = who.split()
            if not said.isdisjoint(parts):
                named.add(who)
                names.update(parts)
        weighted: dict[str, float] = {}
        for term in index_terms(" ".join(w for w in words if w not in names)):
            weighted[term] = weighted.get(term, 0.0) + 1.0
        if not weighted:  # only stop words or names: match them as they are
            for w in words:
                term = _SPEAKER + w if w in names else w
                weighted[term] = weighted.get(term, 0.0) + 1.0
        dates = {w for w in words if w in _MONTH_SET or (w.isdigit() and len(w) == 4)}
        return weighted, named, asks_when(words), dates

    def specific(self, query: str, share: float) -> bool:
        """True when a word of ``query`` (not a speaker's name) is held by at most
        ``share`` of the documents, and by one at least: the query asks for
        something in particular (never with a ``share`` of 0)."""
        return self._specific(self._query(query)[0], share)

    def _specific(self, weighted: dict[str, float], share: float) -> bool:
        if share <= 0:
            return False
        most = max(1.0, share * self._live)
        return any(0 < self._held_by(t) <= most for t in weighted)

    def search(self, query: str, share: float) -> tuple[dict[int, float], bool]:
        """:meth:`sparse_scores` and :meth:`specific` of one query, in one pass."""
        parsed = self._query(query)
        return self._scores(*parsed), self._specific(parsed[0], share)

    def sparse_scores(self, query: str) -> dict[int, float]:
        """Scores of the documents the query reaches (the others score 0)."""
        return self._scores(*self._query(query))

    def _scores(
        self, weighted: dict[str, float], named: set[str], when: bool, dates: set[str]
    ) -> dict[int, float]:
        cfg = self.config
        first = self._bm25(weighted)
        if not first:
            return {}
        if cfg.feedback_docs and cfg.feedback_terms and cfg.feedback_weight:
            expansion = self._feedback(first, weighted)
            if expansion:
                self._bm25(expansion, first)
        if len(first) > cfg.candidates:
            # What the bonuses and neighbours could lift into a top 10 is near the top
            # (a sort in C beats a heap in Python at these sizes).
            ranked = sorted(first.items(), key=_SCORE, reverse=True)
            first = dict(ranked[: cfg.candidates])
        scores = self._neighbours(first) if cfg.neighbour_weight else first
        speakers, timely, said = self._speakers, self._timely, self._dates
        for i in scores:
            bonus = 1.0
            if named and speakers[i] in named:
                bonus += cfg.speaker_boost
            if when and timely[i]:
                bonus += cfg.when_boost
            if dates and not dates.isdisjoint(said[i]):
                bonus += cfg.date_weight
            scores[i] *= bonus
        return scores

    def _feedback(self, first: dict[int, float], weighted: dict[str, float]) -> dict[str, float]:
        cfg = self.config
        best = heapq.nlargest(cfg.feedback_docs, first.items(), key=_SCORE)
        top = best[0][1] or 1.0
        pool: dict[str, float] = {}
        most = max(2.0, FEEDBACK_MAX_SHARE * self._live)
        postings, n = self._postings, self._live
        for i, s in best:
            size = self._lengths[i] or 1
            for term, f in Counter(self._terms[i]).items():
                held = len(postings[term]) // 2
                if term in weighted or held > most:
                    continue
                idf = math.log(1 + (n - held + 0.5) / (held + 0.5))
                pool[term] = pool.get(term, 0.0) + (s / top) * f / size * idf
        chosen = heapq.nlargest(cfg.feedback_terms, pool.items(), key=_SCORE)
        total = sum(w for _, w in chosen) or 1.0
        return {t: cfg.feedback_weight * len(chosen) * w / total for t, w in chosen}

    def _neighbours(self, scores: dict[int, float]) -> dict[int, float]:
        weight = self.config.neighbour_weight
        out = dict(scores)
        last = len(self._lengths) - 1
        window = self.config.neighbour_window
        turns, lengths = self._turns, self._lengths
        own, best = scores.get, out.get
        for i, s in scores.items():
            if not turns[i]:
                continue
            for d in range(1, window + 1):
                gain = weight * s / d
                for j in (i - d, i + d):
                    if 0 <= j <= last and turns[j] and lengths[j] >= 0:
                        lifted = own(j, 0.0) + gain
                        if lifted > best(j, 0.0):
                            out[j] = lifted
        return out

    def top(
        self, query: str, k: int, among: Iterable[int] | None = None
    ) -> list[tuple[int, float]]:
        """Up to ``k`` (index, score) pairs with a positive score, best first (the
        later document first on a tie); only indices in ``among`` when given."""
        scores = self.sparse_scores(query)
        if among is not None:
            keep = set(among)
            scores = {i: s for i, s in scores.items() if i in keep}
        return heapq.nlargest(k, ((i, s) for i, s in scores.items() if s > 0), key=_ORDER)


_SCORE: Final = operator.itemgetter(1)
_ORDER: Final = operator.itemgetter(1, 0)
