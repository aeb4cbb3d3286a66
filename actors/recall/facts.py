"""Atomic facts from conversation turns, through a chat model (as Mem0 extracts them).

Optional: with ``[longterm] facts_base_url`` set, ``record()`` asks an
OpenAI-compatible chat endpoint for the facts the recorded messages state, one
short self-contained sentence each, with the numbers of the messages each comes
from, and remembers the facts instead of the messages (their ids kept as the
facts' sources). The memories closest to the messages are shown to the model as
already known, and a fact that repeats a memory (the same words, or a near
duplicate by word shingles) only refreshes it. When the endpoint fails or answers
something else, the messages are remembered as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import msgspec
import structlog

from actormem.actors.messages import Message
from actormem.actors.recall.embeddings import OpenAIEndpoint
from actormem.actors.text.duplicates import DEFAULT_NEAR_DUPLICATE_THRESHOLD, jaccard, shingles
from actormem.runtime.errors import ActormemError

if TYPE_CHECKING:
    from actormem.actors.recall.longterm import LongTermMemory, MemoryEntry

__all__ = (
    "ExtractedFact",
    "FactExtractionError",
    "FactExtractor",
    "OpenAIFactExtractor",
    "record_facts",
)

log = structlog.get_logger("actormem.longterm")

#: Memories shown to the model as known facts, and compared with each new fact.
KNOWN_SHOWN: Final = 10

#: The most facts kept from one answer (a runaway answer is cut).
MAX_FACTS_PER_CALL: Final = 50
_INSTRUCTIONS: Final = """\
You extract facts worth remembering from conversation messages.
Return JSON only: {"facts": [{"text": "...", "sources": [1, 2]}]}.
Each fact is one short, self-contained sentence that names who it is about (never \
"I" or "you"), keeps dates, numbers and names, and lists the numbers of the \
messages it comes from. Leave out greetings, small talk and anything in the known \
facts. No facts: {"facts": []}."""


class FactExtractionError(ActormemError):
    """The chat endpoint failed or did not answer with facts."""


class ExtractedFact(msgspec.Struct, frozen=True):
    """A fact and the indices (into the messages given) of the messages it comes from."""

    text: str
    sources: tuple[int, ...] = ()


class _Answer(msgspec.Struct):
    facts: list[ExtractedFact]


class FactExtractor:
    """Anything that extracts facts (the OpenAI client below, or a test double)."""

    async def extract(
        self, messages: Sequence[Message], known: Sequence[str]
    ) -> list[ExtractedFact]:
        """The facts ``messages`` state that ``known`` does not hold yet."""
        raise NotImplementedError


def render_request(messages: Sequence[Message], known: Sequence[str]) -> str:
    """The user message of an extraction request: the known facts, then the messages
    numbered from 1, each with its speaker and when it was said."""
    lines = ["Known facts:"]
    lines += [f"- {k}" for k in known] or ["(none)"]
    lines.append("Messages:")
    for n, m in enumerate(messages, start=1):
        lines.append(f"{n}. [{m.name or m.role}] {m.text()}")
    return "\n".join(lines)


def parse_answer(content: str | None, count: int) -> list[ExtractedFact]:
    """The facts of a model's answer, with sources turned into 0-based indices below
    ``count`` (out-of-range ones dropped).

    Raises:
        FactExtractionError: the answer is not the JSON asked for.
    """
    text = (content or "").strip()
    if text.startswith("```"):  # a fenced block: its inside
        text = text.strip("`").removeprefix("json").strip()
    try:
        answer = msgspec.json.decode(text, type=_Answer)
    except msgspec.DecodeError as exc:
        raise FactExtractionError(f"the model did not answer with facts: {exc}") from None
    out = []
    for fact in answer.facts[:MAX_FACTS_PER_CALL]:
        sources = tuple(sorted({s - 1 for s in fact.sources if 1 <= s <= count}))
        if fact.text.strip():
            out.append(ExtractedFact(fact.text.strip(), sources))
    return out


class OpenAIFactExtractor(FactExtractor, OpenAIEndpoint):
    """Extracts facts with ``openai.AsyncOpenAI(...).chat.completions.create`` (the
    arguments are :class:`~actormem.actors.recall.embeddings.OpenAIEndpoint`'s)."""

    async def extract(
        self, messages: Sequence[Message], known: Sequence[str]
    ) -> list[ExtractedFact]:
        """The facts ``messages`` state that ``known`` does not hold yet.

        Raises:
            FactExtractionError: the request failed or the answer holds no facts list.
        """
        import openai

        try:
            response: Any = await self._client.chat.completions.create(
                model=self.model,
                messages=[
                    {"role": "system", "content": _INSTRUCTIONS},
                    {"role": "user", "content": render_request(messages, known)},
                ],
                temperature=0,
            )
            content = response.choices[0].message.content
        except openai.OpenAIError as exc:
            raise FactExtractionError(f"fact extraction request failed: {exc}") from exc
        except (AttributeError, IndexError, TypeError) as exc:
            raise FactExtractionError(f"the chat endpoint answered garbage: {exc}") from exc
        return parse_answer(content, len(messages))


async def record_facts(
    memory: LongTermMemory, extractor: FactExtractor, messages: Sequence[Message]
) -> list[MemoryEntry]:
    """Remember the facts ``extractor`` finds in ``messages`` (those of a role
    ``memory`` records); return the new entries. A fact that repeats a memory
    refreshes it instead; a failed extraction records the messages as they are
    (and extraction rests for ``facts_retry_after`` seconds)."""
    kept = [m for m in messages if m.role in memory.config.record_roles and m.text().strip()]
    if not kept:
        return []
    related = memory.related(" ".join(m.text() for m in kept), KNOWN_SHOWN)
    try:
        facts = await extractor.extract(kept, [e.text for e in related])
    except Exception as exc:  # any failure of an optional endpoint: keep the messages
        memory.facts_off_until = memory.clock() + memory.config.facts_retry_after
        log.warning(
            "longterm_fact_extraction_failed",
            reason=f"{type(exc).__name__}: {exc}",
            fallback="messages",
            retry_after=memory.config.facts_retry_after,
        )
        return memory.record(kept)
    out = []
    for fact in facts:
        sources = [kept[i] for i in fact.sources] or kept
        given = [m.importance for m in sources if m.importance is not None]
        importance = max(given) if given else memory.importance_of(fact.text)
        twin = _near_duplicate(fact.text, memory.related(fact.text, KNOWN_SHOWN))
        if twin is not None:
            memory.refresh(twin.id, importance)
            continue
        entry = memory.remember(
            fact.text,
            importance,
            speaker=sources[0].name or sources[0].role,
            source_message_ids=tuple(m.id for m in sources),
            said=sources[0].timestamp,
        )
        if entry is not None:
            out.append(entry)
    return out


def _near_duplicate(text: str, candidates: Sequence[MemoryEntry]) -> MemoryEntry | None:
    mine = shingles(text)
    for entry in candidates:
        if jaccard(mine, shingles(entry.text)) >= DEFAULT_NEAR_DUPLICATE_THRESHOLD:
            return entry
    return None
