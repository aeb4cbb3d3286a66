"""What the framework adapters share: the recall text they give a model, and the
text of an OpenAI message's content."""

from __future__ import annotations

import json
from typing import Any

from actormem.actors.memory.handle import MemoryHandle
from actormem.actors.recall.inbox import render_insights_block
from actormem.actors.recall.longterm import render_memories_block
from actormem.runtime import TokenCounter

__all__ = ("content_text", "recall_text")


async def recall_text(
    memory: MemoryHandle, query: str | None, k: int, max_tokens: int, counter: TokenCounter
) -> str | None:
    """The insights ``memory`` received and its long-term memories relevant to
    ``query`` (none without a query), at most ``k`` of each, as quoted-data blocks
    (``<long_term_memory>``, ``<shared_insights>``) within ``max_tokens``; None if
    there are none."""
    insights = await memory.held_insights(query, k)
    recalled = await memory.retrieve(query, k) if query else []
    half = max_tokens // 2
    blocks = [
        render_memories_block(recalled, half, counter) if recalled else None,
        render_insights_block(insights, half, counter) if insights else None,
    ]
    found = [b for b in blocks if b]
    return "\n\n".join(found) if found else None


def content_text(content: Any) -> str:
    """An OpenAI message's content as text: text parts joined, an object as JSON."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict)).strip()
    return json.dumps(content)
