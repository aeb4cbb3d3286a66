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

_WORD: Final = re.compile(r"[0-9a-z]+(?:['.-][0-9a-z]+)*")
K1: Final = 1.5
B: Final = 0.75


def tokenize(text: str) -> list[str]:
    """Lowercase words and numbers of ``text`` (``3.5``, ``don't``, ``a-b`` stay whole)."""
    return _WORD.findall(text.lower())


class BM25:
    """A BM25 index over a fixed list of documents.

    Args:
        documents: the texts, in the order scores are returned.
    """

    def __init__(self, documents: Sequence[str], k1: float = K1, b: float = B) -> None:
        self.k1 = k1
        self.b = b
        self._docs = [Counter(tokenize(d)) for d in documents]
        self._lengths = [sum(c.values()) for c in self._docs]
        n = len(self._docs)
        self._avg = (sum(self._lengths) / n) if n else 0.0
        df: Counter[str] = Counter()
        for c in self._docs:
            df.update(c.keys())
        self._idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}

    def __len__(self) -> int:
        return len(self._docs)

    def scores(self, query: str) -> list[float]:
        """Return each document's score for ``query`` (0 where no query word occurs)."""
        terms = [t for t in set(tokenize(query)) if t in self._idf]
        out = [0.0] * len(self._docs)
        if not terms or not self._avg:
            return out
        k1, b, avg = self.k1, self.b, self._avg
        for i, doc in enumerate(self._docs):
            score = 0.0
            norm = k1 * (1 - b + b * self._lengths[i] / avg)
            for t in terms:
                f = doc.get(t)
                if f:
                    score += self._idf[t] * f * (k1 + 1) / (f + norm)
            out[i] = score
        return out

    def top(self, query: str, k: int) -> list[tuple[int, float]]:
        """Return up to ``k`` (index, score) pairs with a positive score, best first."""
        scored = [(i, s) for i, s in enumerate(self.scores(query)) if s > 0]
        scored.sort(key=lambda p: (-p[1], -p[0]))
        return scored[:k]
