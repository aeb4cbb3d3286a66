"""The score of a long-term memory, as Generative Agents ranks them: recency,
importance and relevance, each min-max normalised over the candidates."""

from __future__ import annotations

__all__ = ("score_components",)


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
