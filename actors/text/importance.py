"""An offline estimate of how important a remembered text is (0..1), for memories
recorded without an importance.

The score starts at ``BASE`` and adds, each at most once:

- ``+0.15`` *specifics*: a number, a date or a word placing it in time;
- ``+0.15`` *names*: a capitalised word that does not start a sentence;
- ``+0.15`` *a fact about someone*: a life event, a plan, a preference or a
  commitment ("moved", "adopted", "allergic", "decided", "love", "will", ...);
- ``+0.1`` *substance*: eight content words or more;

and takes off ``0.15`` for small talk: fewer than three content words (after stop
words), as in "Thanks, you too!". The result is clamped to 0.05..0.95, so an
explicit importance of 0 or 1 always outranks an estimate.
"""

from __future__ import annotations

import re
from typing import Final

from actormem.actors.text.bm25 import tokenize
from actormem.actors.text.terms import STOP_WORDS, listed, mentions_time, stem

__all__ = ("BASE", "estimate_importance")

BASE: Final = 0.35
_LOWEST: Final = 0.05
_HIGHEST: Final = 0.95
_NAME: Final = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]+")
#: Stems of words that say a fact about someone: life events, plans, likes, duties.
_FACT_STEMS: Final = frozenset(
    stem(w)
    for w in listed(
        """moved adopted married divorced born died graduated hired fired promoted
    started finished quit joined bought sold won lost broke injured allergic diagnosed
    pregnant decided plan planning promise promised agreed must deadline appointment
    love loves hate hates favorite favourite prefer always never birthday anniversary
    password code address phone"""
    )
)


def estimate_importance(text: str) -> float:
    """The estimated importance of ``text`` (see the module doc for the rules)."""
    words = tokenize(text)
    content = [w for w in words if w not in STOP_WORDS]
    score = BASE
    if mentions_time(words) or any(w[0].isdigit() for w in words):
        score += 0.15
    if _NAME.search(text.strip()):
        score += 0.15
    if any(stem(w) in _FACT_STEMS for w in content):
        score += 0.15
    if len(content) >= 8:
        score += 0.1
    if len(content) < 3:
        score -= 0.15
    return round(min(_HIGHEST, max(_LOWEST, score)), 2)
