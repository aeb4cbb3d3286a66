"""Index terms of a text for ranked retrieval: case-folded words, stop words dropped,
a light suffix stemmer, and the words that say *when* something happened.

The stemmer is deliberately small (no dictionary, English suffixes only): plurals,
``-ing``, ``-ed`` and a final ``e`` are taken off, so "paints", "painted",
"painting" and "paint" share a term, as do "bake" and "baking". Words of other
scripts, numbers and short words are kept as they are.
"""

from __future__ import annotations

import datetime
import functools
import math
import re
from typing import Final

from actormem.actors.text.bm25 import tokenize

__all__ = (
    "MONTHS",
    "STOP_WORDS",
    "TEMPORAL_WORDS",
    "asks_when",
    "date_terms",
    "forget_texts",
    "index_terms",
    "listed",
    "mentions_time",
    "stem",
    "terms_of",
)


def listed(text: str) -> list[str]:
    """The words of a whitespace-separated list."""
    return text.split()


#: Function words that say nothing about what a text is about (question words too:
#: "what did she paint" is about painting).
STOP_WORDS: Final = frozenset(
    listed(
        """a about above after again against all am an and any are aren't as at be because
    been before being below between both but by can can't could couldn't did didn't do
    does doesn't doing don't down during each few for from further had hadn't has hasn't
    have haven't having he he'd he'll he's her here here's hers herself him himself his
    how how's i i'd i'll i'm i've if in into is isn't it it's its itself let's me more
    most mustn't my myself no nor not of off on once only or other ought our ours
    ourselves out over own same shan't she she'd she'll she's should shouldn't so some
    such than that that's the their theirs them themselves then there there's these they
    they'd they'll they're they've this those through to too under until up very was
    wasn't we we'd we'll we're we've were weren't what what's when when's where where's
    which while who who's whom why why's will with won't would wouldn't you you'd you'll
    you're you've your yours yourself yourselves also just really yeah yes oh hey hi
    wow thanks thank so got get gets getting would like kind lot much many"""
    )
)

MONTHS: Final = listed(
    "january february march april may june july august september october november december"
)
_WEEKDAYS: Final = listed("monday tuesday wednesday thursday friday saturday sunday")

#: Words that place an event in time ("yesterday", "last week", "in May", "2019").
TEMPORAL_WORDS: Final = frozenset(
    [
        *MONTHS,
        *_WEEKDAYS,
        *listed(
            """yesterday today tonight tomorrow ago last next weekend week weeks month
        months year years recently lately since earlier soon later morning evening night
        afternoon birthday anniversary holiday holidays summer winter spring autumn fall
        christmas"""
        ),
    ]
)
_YEAR: Final = re.compile(r"^(1[89]|20)\d\d$")
_QUESTION_OF_TIME: Final = (
    ("when",),
    ("what", "year"),
    ("which", "year"),
    ("what", "month"),
    ("which", "month"),
    ("what", "date"),
    ("what", "day"),
    ("how", "long"),
    ("how", "many", "years"),
    ("how", "many", "months"),
    ("how", "many", "weeks"),
    ("how", "many", "days"),
)
_VOWELS: Final = frozenset("aeiouy")


@functools.lru_cache(maxsize=65_536)
def stem(word: str) -> str:
    """The light stem of a case-folded word (see the module doc)."""
    if len(word) <= 3 or not word.isalpha() or not word.isascii():
        return word
    w = word
    if w.endswith("'s"):
        w = w[:-2]
    if w.endswith("ies") and len(w) > 4:
        w = w[:-3] + "y"
    elif w.endswith("sses"):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith(("ss", "us", "is")) and len(w) > 3:
        w = w[:-1]
    for suffix in ("ing", "ed"):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            root = w[: -len(suffix)]
            if any(c in _VOWELS for c in root):
                w = root
                if len(w) > 3 and w[-1] == w[-2] and w[-1] not in "lsz":
                    w = w[:-1]  # running -> run, planned -> plan
                break
    if len(w) > 3 and w.endswith("e"):
        w = w[:-1]  # bake / baking -> bak
    return w


#: How many words' terms :func:`index_terms` keeps; past this many it starts again.
TERMS_KEPT: Final = 65_536
# A word's index term, or "" for a stop word.
_terms: dict[str, str] = {}


def index_terms(text: str) -> list[str]:
    """The stemmed words of ``text`` that are not stop words, in order."""
    return terms_of(tokenize(text))


def terms_of(words: list[str]) -> list[str]:
    """:func:`index_terms` of a text already split into ``words`` (:func:`tokenize`)."""
    out = []
    for word in words:
        term = _terms.get(word)
        if term is None:
            if len(_terms) >= TERMS_KEPT:
                _terms.clear()
            term = _terms[word] = _term(word)
        if term:
            out.append(term)
    return out


def forget_texts() -> None:
    """Drop the words :func:`index_terms` and :func:`stem` keep."""
    _terms.clear()
    stem.cache_clear()


def _term(word: str) -> str:
    word = word.replace("\u2019", "'")
    return "" if word in STOP_WORDS else stem(word)


def mentions_time(words: list[str]) -> bool:
    """True when the case-folded ``words`` place something in time (a temporal
    word or a year)."""
    return any(w in TEMPORAL_WORDS or _YEAR.match(w) for w in words)


def asks_when(words: list[str]) -> bool:
    """True when the case-folded ``words`` of a question ask for a time ("when",
    "what year", "how long"...)."""
    seen = set(words)
    return any(all(w in seen for w in pattern) for pattern in _QUESTION_OF_TIME)


def date_terms(timestamp: float) -> tuple[str, ...]:
    """The month name and year of a timestamp (UTC): the terms a question naming a
    date matches; none for a time outside the calendar's range."""
    try:
        return _day_terms(math.floor(timestamp / _DAY))
    except (OverflowError, ValueError):
        return ()


_DAY: Final = 86_400


@functools.lru_cache(maxsize=4096)
def _day_terms(day: int) -> tuple[str, ...]:
    try:
        when = datetime.datetime.fromtimestamp(day * _DAY, datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return ()
    return (MONTHS[when.month - 1], str(when.year))
