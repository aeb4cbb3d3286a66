"""Builders of hand-made conversations for the compression tests."""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import anyio
from hypothesis import strategies as st

from actormem.actors.compression import (
    CompressionConfig,
    CompressionOutcome,
    OfflineSummarizer,
    compress,
    reload_ids,
)
from actormem.actors.compression._layout import sendable, set_aside
from actormem.actors.compression.engine import render_problems
from actormem.actors.config import load_app_config
from actormem.actors.messages import Message, ToolCall, count_tokens
from actormem.runtime.tokens import get_counter

_call_ids = itertools.count(1)
_INDEX = re.compile(r"^\[\w+\] ")


def counted(messages: Iterable[Message]) -> list[Message]:
    """Cache every message's token count, as the memory actor does on add."""
    counter = get_counter()
    return [m.with_tokens(count_tokens(m, counter)) for m in messages]


def system(text: str = "You are a careful assistant.") -> Message:
    return Message(role="system", content=text)


def user(text: str, **kw: Any) -> Message:
    return Message(role="user", content=text, **kw)


def assistant(text: str, **kw: Any) -> Message:
    return Message(role="assistant", content=text, **kw)


def tool_unit(name: str, args: dict[str, Any], result: str, **kw: Any) -> list[Message]:
    """An assistant message calling one tool, and its result."""
    call_id = f"call_{next(_call_ids)}"
    call = ToolCall(id=call_id, name=name, arguments=json.dumps(args))
    return [
        Message(role="assistant", content=None, tool_calls=(call,), **kw),
        Message(role="tool", content=result, tool_call_id=call_id, name=name),
    ]


def chatter(n: int, topic: str = "the weather") -> str:
    """Filler text of about ``n`` sentences without facts worth keeping."""
    return " ".join(
        f"we talked a little more about {topic} and nothing much changed." for _ in range(n)
    )


def tokens(view: Sequence[Message]) -> int:
    return sum(m.tokens for m in view)


def problems(view: Sequence[Message]) -> Counter[str]:
    """What is wrong with what ``view`` sends to an LLM, and what it cannot send."""
    found = Counter(_INDEX.sub("", p) for p in render_problems(sendable(view)))
    found.update(set_aside(view))
    return found


def assert_valid(view: Sequence[Message], before: Sequence[Message] | None = None) -> None:
    """Assert what the view sends to an LLM (its complete units) is a valid OpenAI list.

    With ``before`` (the view compression started from), problems it already had
    (a call still waiting for its result, an orphan result) may remain, but no new one.
    """
    new = problems(view) - problems(before or [])
    assert not new, sorted(new)


def reachable_text(
    outcome: CompressionOutcome | Sequence[Message], store: dict[str, list[Message]] | None = None
) -> str:
    """All text an agent can reach: the view, and everything reload ids lead to, recursively.

    Args:
        outcome: an outcome (its view and offloads), or a view.
        store: offloaded messages by reload id (besides the outcome's).
    """
    stored = dict(store or {})
    if isinstance(outcome, CompressionOutcome):
        stored.update(outcome.offloaded)
        view: Sequence[Message] = outcome.messages
    else:
        view = outcome
    seen: set[str] = set()
    texts: list[str] = []
    pending = list(view)
    while pending:
        m = pending.pop()
        text = m.searchable_text()
        texts.append(text)
        ids = reload_ids(text)
        for key in ("reload_id", "offloaded"):
            if isinstance(m.metadata.get(key), str):
                ids.append(m.metadata[key])
        for rid in ids:
            if rid not in seen and rid in stored:
                seen.add(rid)
                pending.extend(stored[rid])
    return "\n".join(texts)


def reachable_ids(outcome: CompressionOutcome) -> set[str]:
    """Ids of the original messages an agent can get back (view or reload chain)."""
    seen: set[str] = set()
    found: set[str] = set()
    pending = list(outcome.messages)
    while pending:
        m = pending.pop()
        found.add(m.id)
        for rid in reload_ids(m.text()):
            if rid not in seen and rid in outcome.offloaded:
                seen.add(rid)
                pending.extend(outcome.offloaded[rid])
    return found


def town_small() -> CompressionConfig:
    """The compression settings of ``configs/town-small.toml`` (small budgets)."""
    path = Path(__file__).resolve().parents[3] / "configs" / "town-small.toml"
    return load_app_config(path).compression


def compress_offline(view: list[Message], config: CompressionConfig) -> CompressionOutcome:
    """Compress ``view`` with the offline summarizer, outside any event loop."""
    counter = get_counter()

    async def go() -> CompressionOutcome:
        return await compress(
            view, config=config, counter=counter, summarizer=OfflineSummarizer(counter)
        )

    return anyio.run(go)


#: Tokens a summary may need at its smallest (summary_min_tokens, label, hint).
SUMMARY_FLOOR = 200


def texts(words: Sequence[str], sizes: Sequence[int], max_words: int) -> st.SearchStrategy[str]:
    """Texts of one of ``sizes`` words, repeating up to ``max_words`` of ``words``.

    Build it once (a module constant) and draw from it: a strategy built inside a
    draw is built and validated again on each draw, a cost that would outweigh the
    drawing itself.
    """
    return st.tuples(
        st.lists(st.sampled_from(words), min_size=1, max_size=max_words), st.sampled_from(sizes)
    ).map(_repeat)


def _repeat(drawn: tuple[list[str], int]) -> str:
    """``size`` words: ``words`` over and over."""
    words, size = drawn
    return " ".join(words[i % len(words)] for i in range(size))
