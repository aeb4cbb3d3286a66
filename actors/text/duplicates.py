"""Exact and near-duplicate texts: case-folded words, word shingles, Jaccard similarity."""

from __future__ import annotations

import math
import re
from typing import Final

__all__ = (
    "DEFAULT_NEAR_DUPLICATE_THRESHOLD",
    "DEFAULT_SHINGLE_SIZE",
    "NearDuplicateIndex",
    "jaccard",
    "shingles",
    "words",
)

# Why word bigrams at 0.7: in a ten-word insight, inserting a word keeps the
# similarity near 0.73 (a duplicate), while substituting one ("spring" for
# "autumn", a different fact) drops it near 0.6 (kept). Trigrams punish every
# edit of a short text too hard to tell the two apart.
DEFAULT_NEAR_DUPLICATE_THRESHOLD: Final = 0.7
DEFAULT_SHINGLE_SIZE: Final = 2

#: Words in any script (``\w`` is Unicode-aware; ``_`` is not a letter here).
_WORD: Final = re.compile(r"[^\W_]+(?:['.-][^\W_]+)*")


def words(text: str) -> list[str]:
    """Return the case-folded words of ``text``, in any script (``Café``, ``東京``, ``3.5``)."""
    return _WORD.findall(text.casefold())


def shingles(text: str, size: int = DEFAULT_SHINGLE_SIZE) -> frozenset[str]:
    """Return the set of ``size``-word shingles of ``text`` (case-folded words).

    A text shorter than ``size`` words is one shingle of all its words.
    """
    seq = words(text)
    if len(seq) <= size:
        return frozenset({" ".join(seq)}) if seq else frozenset()
    return frozenset(" ".join(seq[i : i + size]) for i in range(len(seq) - size + 1))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """Return the Jaccard similarity of two sets: shared over all (0.0 when both are empty)."""
    if not a and not b:
        return 0.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


class NearDuplicateIndex:
    """Finds texts equal or nearly equal to ones already indexed.

    Exact means the same words in the same order, ignoring case, punctuation and
    spacing; near means word-shingle Jaccard similarity at or above ``threshold``.
    An inverted index from shingle to keys keeps a lookup proportional to the
    texts that share one of a text's rarest shingles, not to all texts: a text
    at the threshold shares at least one of any ``n - need + 1`` of its ``n``
    shingles, where ``need`` is the least overlap the threshold allows.

    Args:
        threshold: similarity in (0, 1] from which a text is a near duplicate.
        shingle_size: words per shingle.

    Raises:
        ValueError: the threshold or shingle size is out of range.
    """

    def __init__(
        self,
        threshold: float = DEFAULT_NEAR_DUPLICATE_THRESHOLD,
        shingle_size: int = DEFAULT_SHINGLE_SIZE,
    ) -> None:
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"near-duplicate threshold must be within (0, 1], got {threshold}")
        if shingle_size < 1:
            raise ValueError(f"shingle_size must be >= 1, got {shingle_size}")
        self.threshold = threshold
        self.shingle_size = shingle_size
        self._exact: dict[str, str] = {}
        self._sets: dict[str, tuple[str, frozenset[str]]] = {}
        self._postings: dict[str, set[str]] = {}

    def __len__(self) -> int:
        return len(self._sets)

    def find(self, text: str) -> tuple[str, float] | None:
        """Return ``(key, similarity)`` of the closest indexed duplicate, or None.

        An exact duplicate has similarity 1.0.
        """
        norm = " ".join(words(text))
        key = self._exact.get(norm)
        if key is not None:
            return key, 1.0
        mine = shingles(text, self.shingle_size)
        postings = self._postings
        # Jaccard >= t needs an overlap of at least t * len(mine) shingles (the
        # union is no smaller than mine), so a match holds at least one of any
        # len(mine) - need + 1 of them: the rarest are the cheapest to look up.
        need = max(1, math.ceil(self.threshold * len(mine) - 1e-9))
        rarest = sorted(mine, key=lambda s: len(postings.get(s, ())))[: len(mine) - need + 1]
        candidates: set[str] = set()
        for s in rarest:
            candidates.update(postings.get(s, ()))
        best: tuple[str, float] | None = None
        for cand in candidates:
            sim = jaccard(mine, self._sets[cand][1])
            if sim >= self.threshold and (
                best is None or sim > best[1] or (sim == best[1] and cand < best[0])
            ):
                best = (cand, sim)
        return best

    def add(self, key: str, text: str) -> None:
        """Index ``text`` under ``key`` (replacing what ``key`` held)."""
        self.remove(key)
        norm = " ".join(words(text))
        sh = shingles(text, self.shingle_size)
        self._exact.setdefault(norm, key)
        self._sets[key] = (norm, sh)
        for s in sh:
            self._postings.setdefault(s, set()).add(key)

    def remove(self, key: str) -> None:
        """Forget ``key`` (no error if it is not indexed)."""
        entry = self._sets.pop(key, None)
        if entry is None:
            return
        norm, sh = entry
        if self._exact.get(norm) == key:
            del self._exact[norm]
        for s in sh:
            keys = self._postings.get(s)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._postings[s]
