"""Okapi BM25 ranking over short texts, offline (ranked search, long-term memory).

Small on purpose: documents are tokenised into lowercase words, scored against a
query with the usual k1/b parameters; an index is rebuilt when its documents
change (agent memories are thousands of messages, not millions).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Final

__all__ = ("BM25", "tokenize")

# Letters and digits of any script; "3.5", "don't" and "a-b" stay whole.
_WORD: Final = re.compile(r"[^\W_]+(?:['.-][^\W_]+)*")
K1: Final = 1.5
B: Final = 0.75


def tokenize(text: str) -> list[str]:
    """Case-folded words and numbers of ``text``, in any script."""
    return _WORD.findall(text.casefold())


class BM25:
    """A BM25 index over a list of documents; documents can be appended cheaply.

    Args:
        documents: the texts, in the order scores are returned.
    """

    def __init__(self, documents: Sequence[str] = (), k1: float = K1, b: float = B) -> None:
        self.k1 = k1
        self.b = b
        self._docs: list[Counter[str]] = []
        self._lengths: list[int] = []
        self._total = 0
        self._df: Counter[str] = Counter()
        for d in documents:
            self.add(d)

    def __len__(self) -> int:
        return len(self._docs)

    def add(self, document: str) -> None:
        """Append a document (its index is the previous ``len(self)``)."""
        counts = Counter(tokenize(document))
        self._docs.append(counts)
        length = sum(counts.values())
        self._lengths.append(length)
        self._total += length
        self._df.update(counts.keys())

    def _idf(self, term: str) -> float:
        n = len(self._docs)
        f = self._df.get(term, 0)
        return math.log(1 + (n - f + 0.5) / (f + 0.5))

    def scores(self, query: str) -> list[float]:
        """Return each document's score for ``query`` (0 where no query word occurs)."""
        n = len(self._docs)
        out = [0.0] * n
        terms = [t for t in set(tokenize(query)) if self._df.get(t)]
        if not terms or not self._total:
            return out
        k1, b, avg = self.k1, self.b, self._total / n
        idf = {t: self._idf(t) for t in terms}
        for i, doc in enumerate(self._docs):
            score = 0.0
            for t in terms:
                f = doc.get(t)
                if f:
                    norm = k1 * (1 - b + b * self._lengths[i] / avg)
                    score += idf[t] * f * (k1 + 1) / (f + norm)
            out[i] = score
        return out

    def top(self, query: str, k: int) -> list[tuple[int, float]]:
        """Return up to ``k`` (index, score) pairs with a positive score, best first."""
        scored = [(i, s) for i, s in enumerate(self.scores(query)) if s > 0]
        scored.sort(key=lambda p: (-p[1], -p[0]))
        return scored[:k]
