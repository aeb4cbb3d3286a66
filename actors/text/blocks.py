"""Delimited context blocks that hold quoted data, within a token budget.

Insights from other agents and memories recalled from the past go into an LLM's
context as *data*. Each item's text is quoted as a JSON string literal with ``<``
and ``>`` escaped, so no item can close the block's delimiter, open a fake one, or
pass for a chat-template marker (``<|im_start|>``) or a raw tool-call object: the
model sees one quoted string per line, under a preamble that says what it is.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from datetime import UTC, datetime

from actormem.runtime.tokens import TokenCounter

__all__ = ("forget_texts", "format_time", "quote", "render_block")


def quote(text: str) -> str:
    """Return ``text`` as a JSON string literal with ``<`` and ``>`` escaped.

    The result holds no raw newline, quote, angle bracket or control character of
    the original, so it cannot end the surrounding block or start a new one.
    """
    return json.dumps(text, ensure_ascii=False).replace("<", "\\u003c").replace(">", "\\u003e")


def format_time(timestamp: float) -> str:
    """Return a compact UTC time (``2026-11-21T14:50Z``) for provenance lines."""
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%MZ")


@functools.lru_cache(maxsize=65_536)
def _cost(counter: TokenCounter, text: str) -> int:
    # Blocks are re-rendered for every context() with mostly the same lines.
    return counter.count_text(text)


def _starts_cleanly(line: str) -> bool:
    """True when ``line`` after a newline costs what it costs alone.

    Every encoding we count with (:data:`~actormem.runtime.tokens.ENCODINGS`)
    splits text into pieces before it merges tokens, and ends a piece after a
    newline unless whitespace (or, in ``o200k_base``, a ``/``) follows it. So
    a block's pieces, each ending in a newline, add up to the whole when every
    line starts with another character.
    """
    return bool(line) and not line[0].isspace() and line[0] != "/"


def forget_texts() -> None:
    """Drop the lines whose token counts :func:`render_block` keeps."""
    _cost.cache_clear()


def render_block(
    tag: str,
    preamble: str,
    lines: Sequence[str],
    budget_tokens: int,
    counter: TokenCounter,
) -> str | None:
    """Render ``<tag>``, the preamble, as many ``lines`` as fit, and ``</tag>``.

    Lines are taken in the given order (most wanted first); a line that does not
    fit is skipped and later, shorter ones may still go in. The returned text's
    token count (``counter.count_text``) is at most ``budget_tokens``.

    Args:
        tag: the delimiter's name (letters, digits, ``_``).
        preamble: one line saying what the block holds and how to treat it.
        lines: the items, each already quoted and on one line.
        budget_tokens: the most tokens the block may cost.
        counter: the token counter of the target model.

    Returns:
        The block, or None when no line fits (an empty block is not worth its cost).
    """
    head = f"<{tag}>\n{preamble}\n"
    tail = f"</{tag}>"
    used = _cost(counter, head) + _cost(counter, tail)
    if used >= budget_tokens:
        return None
    chosen: list[str] = []
    clean = True
    for line in lines:
        cost = _cost(counter, line + "\n")
        if used + cost <= budget_tokens:
            chosen.append(line)
            used += cost
            clean = clean and _starts_cleanly(line)
    if chosen and clean:
        text = head + "".join(f"{line}\n" for line in chosen) + tail
        counter.learn(text, used)  # the caller counts the block next
        return text
    # Elsewhere the counts of pieces need not add up exactly, so check the whole
    # and drop from the end until it fits.
    while chosen:
        text = head + "".join(f"{line}\n" for line in chosen) + tail
        if counter.count_text(text) <= budget_tokens:
            return text
        chosen.pop()
    return None
