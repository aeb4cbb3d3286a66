"""The ranker of search and retrieve: terms, speakers, time, feedback, neighbours."""

from __future__ import annotations

import datetime
import random
from collections import Counter

import pytest

from actormem.actors.text.bm25 import BM25, score_counts, word_counts
from actormem.actors.text.importance import estimate_importance
from actormem.actors.text.ranker import _SPEAKER, Ranker, RankerConfig
from actormem.actors.text.terms import asks_when, date_terms, index_terms, stem

PLAIN = RankerConfig(
    speaker_boost=0, when_boost=0, date_weight=0, feedback_weight=0, neighbour_weight=0
)


@pytest.mark.parametrize(
    ("words", "same"),
    [
        (["paint", "paints", "painted", "painting"], True),
        (["bake", "baking", "baked", "bakes"], True),
        (["run", "running"], True),
        (["stories", "story"], True),
        (["class", "classes"], True),
        (["paint", "pain"], False),
    ],
)
def test_the_stemmer_joins_forms_of_a_word(words: list[str], same: bool) -> None:
    assert (len({stem(w) for w in words}) == 1) is same


def test_stop_words_are_not_terms_and_other_scripts_are_kept() -> None:
    assert index_terms("What did she paint in the park?") == ["paint", "park"]
    assert index_terms("東京の天気") == ["東京の天気"]


def test_time_questions_and_dates() -> None:
    assert asks_when(["when", "did", "she", "move"])
    assert asks_when(["what", "year", "was", "it"])
    assert not asks_when(["what", "did", "she", "paint"])
    stamp = datetime.datetime(2023, 5, 8, tzinfo=datetime.UTC).timestamp()
    assert date_terms(stamp) == ("may", "2023")
    assert date_terms(1e30) == ()


def _ranker(config: RankerConfig, turns: list[tuple[str, str]], start: float = 0.0) -> Ranker:
    ranker = Ranker(config)
    for n, (speaker, text) in enumerate(turns):
        ranker.add(text, speaker, start + n)
    return ranker


def test_word_forms_match_where_plain_words_do_not() -> None:
    ranker = _ranker(PLAIN, [("a", "She painted a sunrise."), ("a", "The bus was late.")])
    assert [i for i, _ in ranker.top("what does she paint?", 5)] == [0]


def test_a_named_speaker_is_a_field_not_a_word() -> None:
    turns = [
        ("Mel", "Caroline, I went hiking with the kids."),  # names Caroline, says hiking
        ("Caroline", "I went hiking last weekend too."),
    ]
    boosted = _ranker(RankerConfig(feedback_weight=0, neighbour_weight=0), turns)
    assert boosted.top("Where did Caroline go hiking?", 1)[0][0] == 1
    assert boosted.top("Caroline's hiking", 1)[0][0] == 1  # a possessive names her too
    # A query of names only finds what the speaker said.
    assert {i for i, _ in boosted.top("Caroline", 5)} == {1}


def test_a_when_question_favours_a_turn_that_places_it_in_time() -> None:
    turns = [
        ("a", "The support group was powerful."),
        ("a", "Support group yesterday, it was good."),
    ]
    config = RankerConfig(feedback_weight=0, neighbour_weight=0)
    assert _ranker(PLAIN, turns).top("support group", 1)[0][0] == 0
    assert _ranker(config, turns).top("When did she go to the support group?", 1)[0][0] == 1


def test_a_month_in_the_query_matches_when_a_turn_was_said() -> None:
    may = datetime.datetime(2023, 5, 8, tzinfo=datetime.UTC).timestamp()
    june = datetime.datetime(2023, 6, 8, tzinfo=datetime.UTC).timestamp()
    ranker = Ranker(RankerConfig(feedback_weight=0, neighbour_weight=0))
    ranker.add("We adopted a puppy.", "a", june)
    ranker.add("We adopted a kitten.", "a", may)
    assert ranker.top("what did they adopt in May 2023", 1)[0][0] == 1


def test_an_answer_is_found_through_the_question_before_it() -> None:
    turns = [
        ("a", "What instrument do you play?"),
        ("b", "The violin, since I was six."),
        ("a", "Nice weather today."),
    ]
    assert [i for i, _ in _ranker(PLAIN, turns).top("which instrument", 5)] == [0]
    found = _ranker(RankerConfig(feedback_weight=0), turns).top("which instrument", 5)
    assert [i for i, _ in found][:2] == [0, 1]
    # A note that is not a turn of a conversation has no neighbours.
    notes = Ranker(RankerConfig(feedback_weight=0))
    for speaker, text in turns:
        notes.add(text, speaker, turn=False)
    assert [i for i, _ in notes.top("which instrument", 5)] == [0]


def test_feedback_brings_in_documents_sharing_the_best_hits_words() -> None:
    turns = [
        ("a", "The harbour festival has lanterns and fireworks."),
        ("a", "Lanterns and fireworks light the bay every June."),
        ("a", "Grain prices fell."),
    ]
    config = RankerConfig(neighbour_weight=0, feedback_docs=1, feedback_terms=3)
    plain = _ranker(PLAIN, turns).top("harbour festival", 5)
    assert [i for i, _ in plain] == [0]
    assert [i for i, _ in _ranker(config, turns).top("harbour festival", 5)] == [0, 1]


def test_a_removed_document_scores_nothing_and_is_no_neighbour() -> None:
    ranker = _ranker(
        RankerConfig(feedback_weight=0), [("a", "x"), ("a", "rowing club"), ("a", "y")]
    )
    ranker.remove(1)
    ranker.remove(1)  # twice is once
    assert ranker.top("rowing", 5) == []
    assert not ranker.specific("rowing", 0.5)


def test_a_query_is_specific_when_one_of_its_words_is_rare() -> None:
    turns = [("a", f"the market on day {n}") for n in range(40)] + [("a", "the ferry to Osterholm")]
    ranker = _ranker(RankerConfig(), turns)
    assert ranker.specific("market ferry", 0.05)
    assert not ranker.specific("market", 0.05)
    assert not ranker.specific("zeppelin", 0.05)


@pytest.mark.parametrize(
    ("text", "low", "high"),
    [
        ("Thanks, you too!", 0.0, 0.3),
        ("ok", 0.0, 0.3),
        (
            "My sister Anna moved to Berlin in May 2021 and started a new job at the clinic.",
            0.8,
            1.0,
        ),
        ("The storehouse door code is 4471.", 0.5, 0.8),
    ],
)
def test_importance_is_estimated_from_the_text(text: str, low: float, high: float) -> None:
    assert low <= estimate_importance(text) <= high


def test_scores_of_word_counts_are_the_scores_of_an_index() -> None:
    texts = [
        "the mill key is red",
        "the old mill by the river",
        "",
        "river river river",
        "a code of the harbour is 4896",
    ]
    query = "river mill 4896 nothing"
    by_counts = score_counts(query, [word_counts(t) for t in texts])
    assert by_counts == pytest.approx(BM25(texts).scores(query))
    assert word_counts("the river") is word_counts("the river")


def _expected_postings(ranker: Ranker) -> dict[str, dict[int, int]]:
    """The postings a ranker's live documents call for, rebuilt from its documents."""
    out: dict[str, dict[int, int]] = {}
    for i, terms in enumerate(ranker._terms):
        if ranker._lengths[i] < 0:
            continue
        for term, count in Counter(terms).items():
            out.setdefault(term, {})[i] = count
        for part in set(ranker._speakers[i].split()):
            out.setdefault(_SPEAKER + part, {})[i] = 1
    return out


def test_postings_stay_those_of_the_live_documents_through_adds_and_removes() -> None:
    rng = random.Random(3)
    words = ["mill", "river", "key", "code", "ada", "bram", "harbour", "may", "2023", "red"]
    ranker = Ranker()
    live: list[int] = []
    for _ in range(300):
        if live and rng.random() < 0.3:
            ranker.remove(live.pop(rng.randrange(len(live))))
        else:
            text = " ".join(rng.choices(words, k=rng.randint(1, 6)))
            live.append(ranker.add(text, rng.choice(["ada", "bram", None]), 1.7e9))
        held = {
            term: dict(zip(docs[::2], docs[1::2], strict=True))
            for term, docs in ranker._postings.items()
        }
        assert held == _expected_postings(ranker)
