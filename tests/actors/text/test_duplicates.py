"""Exact and near-duplicate texts."""

from __future__ import annotations

import pytest

from actormem.actors.text.duplicates import NearDuplicateIndex, words


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
