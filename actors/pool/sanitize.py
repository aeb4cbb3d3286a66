"""Making untrusted text safe to show another agent: insight texts and short labels."""

from __future__ import annotations

import unicodedata
from typing import Final

from actormem.actors.pool.insights import DEFAULT_MAX_INSIGHT_CHARS, InsightError

__all__ = ("DEFAULT_MAX_LABEL_CHARS", "clean_label", "sanitize_insight_text")

DEFAULT_MAX_LABEL_CHARS: Final = 64
#: Text longer than this many times the limit is cut before it is even scanned.
_PRECUT_FACTOR: Final = 8
#: ASCII, since NFKC would turn "\u2026" into it anyway (and sanitizing stays idempotent).
_ELLIPSIS: Final = "..."

#: Characters that render as nothing but are letters or marks, not format chars.
_INVISIBLE: Final = frozenset(
    "\u034f\u115f\u1160\u17b4\u17b5\u180b\u180c\u180d\u180e\u180f\u2800\u3164\uffa0"
)
#: Unicode categories dropped outright: control, format (zero-width, bidi
#: overrides, tag characters), private use, surrogates, unassigned.
_DROP_CATEGORIES: Final = frozenset({"Cc", "Cf", "Co", "Cs", "Cn"})
_SPACE_CATEGORIES: Final = frozenset({"Zs", "Zl", "Zp"})
_SPACE_CONTROLS: Final = frozenset("\t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85")
#: What the rules below do to ASCII (which NFKC leaves as it is): whitespace
#: controls become spaces, other controls go.
_ASCII_CONTROLS: Final = {
    code: (" " if chr(code) in _SPACE_CONTROLS else None) for code in [*range(32), 127]
}


def _is_invisible(ch: str) -> bool:
    code = ord(ch)
    return ch in _INVISIBLE or 0xFE00 <= code <= 0xFE0F or 0xE0100 <= code <= 0xE01EF


def sanitize_insight_text(text: str, max_chars: int = DEFAULT_MAX_INSIGHT_CHARS) -> str:
    """Return ``text`` made safe to show another agent as data.

    NFKC-normalises (full-width and other look-alike forms become plain ones),
    turns every kind of whitespace and line break into one space, drops control,
    format, private-use, unassigned and invisible characters (zero-width spaces
    and joiners, bidi embeddings/overrides/isolates, tag characters, variation
    selectors, Hangul fillers), trims, and cuts the result to ``max_chars``
    characters, ending with ``...`` when cut. Idempotent.

    Args:
        text: the untrusted text.
        max_chars: the longest result (at least 4).

    Raises:
        InsightError: ``text`` is not a string, or ``max_chars`` is below 4.
    """
    if not isinstance(text, str):
        raise InsightError(f"insight text must be a string, got {type(text).__name__}")
    if max_chars < 4:
        raise InsightError(f"max_chars must be >= 4, got {max_chars}")
    text = text[: max_chars * _PRECUT_FACTOR]
    if text.isascii():  # most text: the same result without a look at each character
        clean = " ".join(text.translate(_ASCII_CONTROLS).split())
    else:
        text = unicodedata.normalize("NFKC", text)
        out: list[str] = []
        for ch in text:
            if ch in _SPACE_CONTROLS:
                out.append(" ")
                continue
            category = unicodedata.category(ch)
            if category in _SPACE_CATEGORIES:
                out.append(" ")
            elif category not in _DROP_CATEGORIES and not _is_invisible(ch):
                out.append(ch)
        clean = " ".join("".join(out).split())
    if len(clean) <= max_chars:
        return text if clean == text else clean  # a clean text is not copied
    cut = clean[: max_chars - len(_ELLIPSIS)]
    space = cut.rfind(" ")
    if space >= max_chars * 0.8:  # prefer a word boundary when one is near the end
        cut = cut[:space]
    return cut.rstrip() + _ELLIPSIS


def clean_label(text: str, what: str, max_chars: int = DEFAULT_MAX_LABEL_CHARS) -> str:
    """Sanitize a short label (topic, agent name) and check it is usable.

    Args:
        text: the untrusted label.
        what: its name in errors (``topic``, ``source``).
        max_chars: the longest label accepted.

    Raises:
        InsightError: not a string, empty once cleaned, or longer than ``max_chars``.
    """
    if not isinstance(text, str):
        raise InsightError(f"{what} must be a string, got {type(text).__name__}")
    if len(text) > max_chars * _PRECUT_FACTOR:
        raise InsightError(f"{what} is {len(text)} characters long; the limit is {max_chars}")
    clean = sanitize_insight_text(text, max(4, len(text) + 1))
    if not clean:
        raise InsightError(f"{what} is empty once control and invisible characters go")
    if len(clean) > max_chars:
        raise InsightError(f"{what} is {len(clean)} characters long; the limit is {max_chars}")
    return clean
