"""What the retrieval benchmark scores with: recall at k, all evidence at k, the
plain BM25 baseline, and the leave-one-conversation-out check of the ranker's
parameters."""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

import msgspec

from actormem.actors.text.ranker import Ranker, RankerConfig
from actormem.benchmarks.retrieval_data import Conversation, Question

__all__ = (
    "CATEGORIES",
    "GRID",
    "GRID_SIZE",
    "STEPS",
    "Fold",
    "PlainBM25",
    "Scores",
    "ablation",
    "held_out",
    "ranker_recall",
)

#: LoCoMo's names of its question categories (as its data card lists them).
CATEGORIES = {1: "single-hop", 2: "temporal", 3: "open-domain", 4: "multi-hop"}

_WORD = re.compile(r"\w+")


class PlainBM25:
    """Textbook Okapi BM25 (rank_bm25's ``BM25Okapi``: k1 1.5, b 0.75, a floor of a
    quarter of the mean idf for words in most documents) over lowercase words."""

    def __init__(self, documents: Sequence[str], k1: float = 1.5, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.docs = [Counter(_WORD.findall(d.lower())) for d in documents]
        self.lengths = [sum(c.values()) for c in self.docs]
        self.avg = sum(self.lengths) / max(1, len(self.docs))
        df: Counter[str] = Counter()
        for c in self.docs:
            df.update(c.keys())
        n = len(self.docs)
        idf = {t: math.log(n - f + 0.5) - math.log(f + 0.5) for t, f in df.items()}
        floor = 0.25 * sum(idf.values()) / max(1, len(idf))
        self.idf = {t: v if v > 0 else floor for t, v in idf.items()}
        self.postings: dict[str, list[int]] = {}
        for i, c in enumerate(self.docs):
            for t in c:
                self.postings.setdefault(t, []).append(i)

    def top(self, query: str, k: int) -> list[int]:
        """The indices of the ``k`` best documents for ``query``."""
        scores: dict[int, float] = {}
        for t in _WORD.findall(query.lower()):
            for i in self.postings.get(t, ()):
                f = self.docs[i][t]
                norm = self.k1 * (1 - self.b + self.b * self.lengths[i] / self.avg)
                scores[i] = scores.get(i, 0.0) + self.idf[t] * f * (self.k1 + 1) / (f + norm)
        return sorted(scores, key=lambda i: -scores[i])[:k]


class Scores:
    """Recall at 5 and 10 and all evidence at 5 and 10 of one method, per category."""

    def __init__(self) -> None:
        self.sums: dict[tuple[str, int, int], float] = {}
        self.counts: Counter[int] = Counter()

    def add(self, question: Question, found: Sequence[str | Sequence[str]]) -> None:
        """Score one question's ranked results: each a dia id, or the dia ids of the
        turns a memory comes from (a fact from two turns holds both)."""
        self.counts[question.category] += 1
        for k in (5, 10):
            top = {d for item in found[:k] for d in ([item] if isinstance(item, str) else item)}
            got = question.evidence & top
            share = len(got) / len(question.evidence)
            for measure, value in (("recall", share), ("all", float(share == 1.0))):
                key = (measure, k, question.category)
                self.sums[key] = self.sums.get(key, 0.0) + value

    def value(self, measure: str, k: int, category: int | None = None) -> float:
        """The mean of ``measure`` at ``k`` over one category, or over all questions."""
        cats = [category] if category is not None else list(self.counts)
        total = sum(self.counts[c] for c in cats)
        return sum(self.sums.get((measure, k, c), 0.0) for c in cats) / max(1, total)


def ranker_recall(
    conversation: Conversation, config: RankerConfig, k: int = 10
) -> tuple[float, int]:
    """The summed recall at ``k`` of :class:`Ranker` with ``config`` over the
    conversation's questions, and how many there are."""
    ranker = Ranker(config)
    for t in conversation.turns:
        ranker.add(t.text, t.speaker, t.said)
    ids = [t.dia_id for t in conversation.turns]
    total = 0.0
    for q in conversation.questions:
        top = {ids[i] for i, _ in ranker.top(q.text, k)}
        total += len(q.evidence & top) / len(q.evidence)
    return total, len(conversation.questions)


#: The parameters a held-out check chooses among (each a small set of general values).
GRID = {
    "speaker_boost": (0.5, 1.0, 2.0),
    "neighbour_weight": (0.3, 0.5, 0.7),
    "neighbour_window": (1, 2),
    "feedback_weight": (0.0, 0.3, 0.5),
}


GRID_SIZE = math.prod(len(values) for values in GRID.values())


def _grid() -> Iterable[RankerConfig]:
    names = list(GRID)
    for values in itertools.product(*(GRID[n] for n in names)):
        yield msgspec.convert(dict(zip(names, values, strict=True)), RankerConfig)


class Fold(msgspec.Struct, frozen=True, kw_only=True):
    """One conversation held out: the parameters chosen on the others (and their
    recall@10 there), and recall@10 on it with them and with the defaults."""

    held_out: str
    questions: int
    chosen: dict[str, float]
    on_the_others: float
    held_out_recall10: float
    default_recall10: float


def held_out(conversations: list[Conversation], progress: Callable[[str], None]) -> list[Fold]:
    """Leave one conversation out: for each, the grid's configuration best on the
    others (mean recall at 10), and its recall at 10 on the one left out, next to
    the default configuration's."""
    configs = list(_grid())
    table: list[list[tuple[float, int]]] = []
    for n, config in enumerate(configs):
        progress(f"held-out check: ranker configuration {n + 1}/{len(configs)}")
        table.append([ranker_recall(c, config) for c in conversations])
    default = [ranker_recall(c, RankerConfig()) for c in conversations]
    out: list[Fold] = []
    for left, conv in enumerate(conversations):

        def on_others(row: list[tuple[float, int]], left: int = left) -> float:
            hits = sum(s for i, (s, _) in enumerate(row) if i != left)
            return hits / max(1, sum(q for i, (_, q) in enumerate(row) if i != left))

        best = max(range(len(configs)), key=lambda c: on_others(table[c]))
        hits, questions = table[best][left]
        chosen = msgspec.structs.asdict(configs[best])
        out.append(
            Fold(
                held_out=conv.name,
                questions=questions,
                chosen={k: chosen[k] for k in GRID},
                on_the_others=on_others(table[best]),
                held_out_recall10=hits / max(1, questions),
                default_recall10=default[left][0] / max(1, questions),
            )
        )
    return out


#: Each step of the ranker, and the parameters that turn it off.
STEPS: dict[str, dict[str, float]] = {
    "speakers": {"speaker_boost": 0.0},
    "time": {"when_boost": 0.0, "date_weight": 0.0},
    "feedback": {"feedback_weight": 0.0},
    "neighbours": {"neighbour_weight": 0.0},
}


def ablation(conversations: list[Conversation]) -> dict[str, float]:
    """Recall at 10 over all questions of the default ranker, with each step turned
    off in turn, and with all of them off (stemmed BM25 without stop words alone)."""
    variants: dict[str, dict[str, float]] = {"all steps": {}}
    variants.update({f"without {name}": off for name, off in STEPS.items()})
    variants["words alone"] = {k: v for off in STEPS.values() for k, v in off.items()}
    out = {}
    for label, off in variants.items():
        config = msgspec.structs.replace(RankerConfig(), **off)
        found = [ranker_recall(c, config) for c in conversations]
        out[label] = sum(h for h, _ in found) / max(1, sum(q for _, q in found))
    return out
