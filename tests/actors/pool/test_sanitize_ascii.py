"""ASCII text takes a shortcut through sanitizing: the same result as character by character."""

from __future__ import annotations

import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st

from actormem.actors.pool.sanitize import sanitize_insight_text
from tests.support import examples

_SPACE_CONTROLS = set("\t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85")


def _by_character(text: str, max_chars: int) -> str:
    """The rules spelled out for each character (ASCII in, so no NFKC change)."""
    kept = []
    for ch in text[: max_chars * 8]:
        category = unicodedata.category(ch)
        if ch in _SPACE_CONTROLS or category == "Zs":
            kept.append(" ")
        elif category != "Cc":
            kept.append(ch)
    return " ".join("".join(kept).split())


@settings(max_examples=examples(200), deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=300))
def test_ascii_text_is_cleaned_as_each_character_says(text: str) -> None:
    expected = _by_character(text, 10_000)
    assert sanitize_insight_text(text, 10_000) == expected
    # With a non-ASCII character the long way is taken: the same answer for the rest.
    assert sanitize_insight_text(text + " é", 10_000) == (expected + " é").strip()


def test_controls_go_and_whitespace_controls_become_one_space() -> None:
    assert sanitize_insight_text("a\tb\n\nc\x00d\x7fe\x1ff  ") == "a b cde f"
