"""Sanitizing shared text and labels."""

from __future__ import annotations

import pytest

from actormem.actors.pool.insights import InsightError
from actormem.actors.pool.sanitize import clean_label, sanitize_insight_text


def test_sanitize_strips_invisible_and_control_characters() -> None:
    dirty = "a\u200bb\u202ec\u2066d\u2069e\U000e0041f\x00g\x1bh\ufe0fi\u3164j"
    assert sanitize_insight_text(dirty) == "abcdefghij"


def test_sanitize_normalises_whitespace_and_full_width_forms() -> None:
    assert sanitize_insight_text("  one\n\ttwo\u2028three\u00a0 four  ") == "one two three four"
    assert sanitize_insight_text("\uff29\uff47\uff4e\uff4f\uff52\uff45") == "Ignore"


def test_sanitize_limits_length_and_is_idempotent() -> None:
    text = "word " * 1000
    clean = sanitize_insight_text(text, max_chars=100)
    assert len(clean) <= 100
    assert clean.endswith("...")
    assert sanitize_insight_text(clean, max_chars=100) == clean


def test_sanitize_rejects_non_text() -> None:
    with pytest.raises(InsightError, match="must be a string"):
        sanitize_insight_text(42)  # type: ignore[arg-type]


def test_labels_are_cleaned_and_length_checked() -> None:
    assert clean_label(" news\u200b ", "topic") == "news"
    with pytest.raises(InsightError, match="topic is 65 characters long; the limit is 64"):
        clean_label("x" * 65, "topic")
    with pytest.raises(InsightError, match="source is 1000000 characters long"):
        clean_label("x" * 1_000_000, "source")
