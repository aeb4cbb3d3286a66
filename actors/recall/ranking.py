"""The score of a long-term memory, as Generative Agents ranks them: recency,
importance and relevance, each min-max normalised over the candidates; and the
fusion of a lexical and an embedding ranking into one relevance."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

__all__ = ("RRF_K", "reciprocal_rank_fusion", "score_components")

#: Reciprocal rank fusion's constant.
RRF_K: Final = 60.0


def score_components(
    ages: list[float], importances: list[float], relevances: list[float], decay: float
) -> list[tuple[float, float, float]]:
    """Return each candidate's normalised ``(recency, importance, relevance)``.

    Args:
        ages: time since each was last recalled, in the decay's time unit.
        importances: each one's importance (0..1).
        relevances: each one's relevance to the query (BM25 or cosine).
        decay: how much recency keeps per time unit.
    """
    # A spread under one time unit's decay counts for less than the full range.
    recency = _normalise([decay**h for h in ages], min_span=1.0 - decay)
    return list(zip(recency, _normalise(importances), _normalise(relevances), strict=True))


def _normalise(values: list[float], min_span: float = 1e-9) -> list[float]:
    """Min-max normalise to 0..1, but never stretch a spread below ``min_span``.

    Plain min-max maps any spread, however tiny, onto the whole 0..1 range, so
    memories recorded a second apart would differ in recency as much as memories
    a year apart. Dividing by at least ``min_span`` keeps small spreads small;
    equal values all get 1.0 (or 0.0 when they are all 0).
    """
    lo, hi = min(values), max(values)
    if hi - lo <= 1e-12:
        return [1.0 if hi > 0 else 0.0] * len(values)
    span = max(hi - lo, min_span)
    return [1.0 - (hi - v) / span for v in values]


def reciprocal_rank_fusion(
    rankings: Sequence[Mapping[str, float]], k: float = RRF_K
) -> dict[str, float]:
    """Fuse scored rankings by reciprocal rank (Cormack et al., 2009): each id scores
    the sum over the rankings holding it of ``1 / (k + its rank)``, rank 1 the best.

    Args:
        rankings: scores by id, one map per ranker (only their order counts).
        k: how much the top ranks outweigh the next ones (60 in the paper).
    """
    fused: dict[str, float] = {}
    for scores in rankings:
        ordered = sorted(scores.items(), key=lambda p: -p[1])
        for rank, (i, _) in enumerate(ordered, start=1):
            fused[i] = fused.get(i, 0.0) + 1.0 / (k + rank)
    return fused
