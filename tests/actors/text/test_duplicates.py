"""Exact and near-duplicate texts."""

from __future__ import annotations

import random

import pytest

from actormem.actors.text.duplicates import NearDuplicateIndex, jaccard, shingles, words


def test_near_duplicate_index_finds_exact_and_near_duplicates() -> None:
    index = NearDuplicateIndex(threshold=0.6)
    index.add("a", "The bakery on Elm Street opens at seven every morning.")
    index.add("b", "Bob's favourite colour is green.")
    assert index.find("the BAKERY on elm street opens at seven, every morning!") == ("a", 1.0)
    near = index.find("The bakery on Elm Street opens at seven every morning now.")
    assert near is not None and near[0] == "a" and 0.6 <= near[1] < 1.0
    assert index.find("Carol plays chess on Sundays.") is None
    index.remove("a")
    assert index.find("The bakery on Elm Street opens at seven every morning.") is None


def test_near_duplicate_threshold_is_configurable() -> None:
    strict = NearDuplicateIndex(threshold=1.0)
    loose = NearDuplicateIndex(threshold=0.3)
    for index in (strict, loose):
        index.add("a", "The river floods every spring near the old mill.")
    other = "The river floods every autumn near the old mill."
    assert strict.find(other) is None
    assert loose.find(other) is not None
    with pytest.raises(ValueError, match="threshold"):
        NearDuplicateIndex(threshold=0.0)


def test_words_and_duplicates_work_in_any_script() -> None:
    assert words("Café au LAIT, 3.5 €") == ["café", "au", "lait", "3.5"]
    index = NearDuplicateIndex()
    index.add("ja", "東京 の 天気 は 晴れ")
    index.add("el", "Η γέφυρα είναι κλειστή")  # noqa: RUF001 (Greek on purpose)
    assert index.find("東京 の 天気 は 晴れ!") == ("ja", 1.0)
    assert index.find("η ΓΈΦΥΡΑ είναι κλειστή") == ("el", 1.0)


@pytest.mark.parametrize("threshold", [0.3, 0.5, 0.7, 0.9, 1.0])
def test_looking_up_only_the_rarest_shingles_finds_what_all_of_them_find(
    threshold: float,
) -> None:
    # The index looks up a few of a text's rarest shingles; a full scan with the
    # same similarity must find nothing better.
    rng = random.Random(threshold)
    vocabulary = ["the", "of", "mill", "key", "code", "river", "old", "is", "red", "blue"]
    texts = [" ".join(rng.choices(vocabulary, k=rng.randint(1, 9))) for _ in range(300)]
    index = NearDuplicateIndex(threshold=threshold)
    for n, text in enumerate(texts[:200]):
        index.add(f"k{n:03}", text)
    for text in texts[200:]:
        mine = shingles(text)
        scores = [(jaccard(mine, shingles(t)), f"k{n:03}") for n, t in enumerate(texts[:200])]
        exact = {f"k{n:03}" for n, t in enumerate(texts[:200]) if words(t) == words(text)}
        found = index.find(text)
        if exact:
            assert found is not None and found[0] in exact and found[1] == 1.0
            continue
        best = max((s for s, _ in scores if s >= threshold), default=None)
        if best is None:
            assert found is None
        else:
            assert found == (min(k for s, k in scores if s == best), best)
