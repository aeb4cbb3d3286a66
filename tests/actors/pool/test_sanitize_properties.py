"""Property tests: whatever text comes in, what reaches a context block is inert."""

from __future__ import annotations

import json
import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st

from actormem.actors.pool.sanitize import sanitize_insight_text
from actormem.actors.text.blocks import quote
from tests.support import examples

#: Text that leans on the characters attackers use: format and control characters,
#: bidi and tag characters, angle brackets, quotes and backslashes.
hostile_text = st.text(
    alphabet=st.one_of(
        st.characters(),
        st.sampled_from(
            "\u200b\u200c\u200d\u2060\ufeff\u202a\u202b\u202c\u202d\u202e\u2066\u2067"
            "\u2068\u2069\U000e0001\U000e0041\ufe0f\x00\x1b\n\r\t<>|\"'\\{}"
        ),
    ),
    max_size=400,
)


@settings(max_examples=examples(300), deadline=None)
@given(hostile_text, st.integers(min_value=4, max_value=300))
def test_sanitized_text_is_short_visible_and_stable(text: str, limit: int) -> None:
    clean = sanitize_insight_text(text, limit)
    assert len(clean) <= limit
    assert clean == clean.strip() and "  " not in clean
    for ch in clean:
        assert unicodedata.category(ch) not in {"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"}
    assert sanitize_insight_text(clean, limit) == clean


@settings(max_examples=examples(300), deadline=None)
@given(hostile_text)
def test_quoted_text_cannot_break_out_of_its_line_or_block(text: str) -> None:
    quoted = quote(sanitize_insight_text(text, 1000))
    assert "<" not in quoted and ">" not in quoted and "\n" not in quoted
    assert quoted.startswith('"') and quoted.endswith('"')
    assert json.loads(quoted) == sanitize_insight_text(text, 1000)
