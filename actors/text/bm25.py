"""Okapi BM25 ranking over short texts, offline (ranked search, long-term memory).

Small on purpose: documents are tokenised into lowercase words, scored against a
query with the usual k1/b parameters; an index is rebuilt when its documents
change (agent memories are thousands of messages, not millions).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Final

__all__ = ("BM25", "WordCounts", "forget_texts", "score_counts", "tokenize", "word_counts")

# Letters and digits of any script; "3.5", "don't" and "a-b" stay whole.
_WORD: Final = re.compile(r"[^\W_]+(?:['.-][^\W_]+)*")
K1: Final = 1.5
B: Final = 0.75
#: In an index this large, a word held by more than half of the documents is skipped
#: when scoring: its weight is near nothing, and its postings would touch half the index.
COMMON_WORD_MIN_DOCS: Final = 200


def tokenize(text: str) -> list[str]:
    """Case-folded words and numbers of ``text``, in any script."""
    return _WORD.findall(text.casefold())


#: A text's words with their counts, and how many words it has.
WordCounts = tuple[Mapping[str, int], int]
#: How many texts' counts :func:`word_counts` keeps; past this many it starts again.
COUNTS_KEPT: Final = 65_536
_counts: dict[str, WordCounts] = {}


def word_counts(text: str) -> WordCounts:
    """The words of ``text`` with their counts, and their number.

    Equal texts share one result (the same insight held by many agents costs its
    words once), so it must not be changed.
    """
    found = _counts.get(text)
    if found is None:
        if len(_counts) >= COUNTS_KEPT:
            _counts.clear()
        counts = Counter(tokenize(text))
        found = _counts[text] = (dict(counts), sum(counts.values()))
    return found


def forget_texts() -> None:
    """Drop the texts :func:`word_counts` keeps."""
    _counts.clear()


def score_counts(
    query: str, documents: Sequence[WordCounts], k1: float = K1, b: float = B
) -> list[float]:
    """BM25 scores of ``documents`` (:func:`word_counts`) for ``query``, without an
    index: the same scores as :class:`BM25`'s, in time proportional to the
    documents times the query's words. For the few documents one agent holds."""
    out = [0.0] * len(documents)
    n = len(documents)
    total = sum(length for _, length in documents)
    if not total:
        return out
    avg = total / n
    for term in sorted(set(tokenize(query))):  # the same sums in every process
        holding = [i for i, (counts, _) in enumerate(documents) if term in counts]
        if not holding or (n >= COMMON_WORD_MIN_DOCS and 2 * len(holding) > n):
            continue
        idf = math.log(1 + (n - len(holding) + 0.5) / (len(holding) + 0.5))
        for i in holding:
            counts, length = documents[i]
            f = counts[term]
            out[i] += idf * f * (k1 + 1) / (f + k1 * (1 - b + b * length / avg))
    return out


class BM25:
    """A BM25 index over a list of documents, with postings so that scoring touches
    only the documents that hold a query word; documents can be appended and
    removed cheaply (a removed document keeps its index and scores 0).

    Args:
        documents: the texts, in the order scores are returned.
    """

    def __init__(self, documents: Sequence[str] = (), k1: float = K1, b: float = B) -> None:
        self.k1 = k1
        self.b = b
        self._lengths: list[int] = []
        self._postings: dict[str, dict[int, int]] = {}
        self._terms: list[tuple[str, ...]] = []
        self._total = 0
        self._live = 0
        for d in documents:
            self.add(d)

    def __len__(self) -> int:
        return len(self._lengths)

    def add(self, document: str) -> int:
        """Append a document; return its index."""
        index = len(self._lengths)
        counts = Counter(tokenize(document))
        for term, freq in counts.items():
            self._postings.setdefault(term, {})[index] = freq
        length = sum(counts.values())
        self._lengths.append(length)
        self._terms.append(tuple(counts))
        self._total += length
        self._live += 1
        return index

    def remove(self, index: int) -> None:
        """Take document ``index`` out of the index (it scores 0 from now on)."""
        terms = self._terms[index]
        if not terms and not self._lengths[index]:
            return
        for term in terms:
            docs = self._postings.get(term)
            if docs is not None:
                docs.pop(index, None)
                if not docs:
                    del self._postings[term]
        self._total -= self._lengths[index]
        self._lengths[index] = 0
        self._terms[index] = ()
        self._live -= 1

    def sparse_scores(self, query: str) -> dict[int, float]:
        """Scores of the documents holding at least one query word (the others score 0)."""
        out: dict[int, float] = {}
        if not self._total:
            return out
        n = self._live
        k1, b, avg = self.k1, self.b, self._total / max(1, n)
        lengths = self._lengths
        for term in set(tokenize(query)):
            docs = self._postings.get(term)
            if not docs or (n >= COMMON_WORD_MIN_DOCS and 2 * len(docs) > n):
                continue
            idf = math.log(1 + (n - len(docs) + 0.5) / (len(docs) + 0.5))
            for i, f in docs.items():
                norm = k1 * (1 - b + b * lengths[i] / avg)
                out[i] = out.get(i, 0.0) + idf * f * (k1 + 1) / (f + norm)
        return out

    def scores(self, query: str) -> list[float]:
        """Return each document's score for ``query`` (0 where no query word occurs)."""
        out = [0.0] * len(self._lengths)
        for i, score in self.sparse_scores(query).items():
            out[i] = score
        return out

    def top(self, query: str, k: int) -> list[tuple[int, float]]:
        """Return up to ``k`` (index, score) pairs with a positive score, best first."""
        scored = [(i, s) for i, s in self.sparse_scores(query).items() if s > 0]
        scored.sort(key=lambda p: (-p[1], -p[0]))
        return scored[:k]
