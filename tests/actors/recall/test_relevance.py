"""retrieve(): a specific query ranks by relevance first; embeddings are fused with
the lexical ranking by reciprocal rank; a memory keeps when it was said."""

from __future__ import annotations

import pytest

from actormem.actors.messages import Message
from actormem.actors.recall.longterm import LongTermConfig, LongTermMemory
from actormem.actors.recall.ranking import reciprocal_rank_fusion
from tests.actors.recall.embeddings import embed
from tests.support.openai_server import OpenAIStub

HOUR = 3600.0


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000_000.0

    def __call__(self) -> float:
        return self.now


def _memory(config: LongTermConfig | None = None) -> tuple[LongTermMemory, Clock]:
    """One old, unimportant memory that answers, then 60 recent important ones that
    share a common word with the question."""
    clock = Clock()
    memory = LongTermMemory(config, clock=clock)
    clock.now -= 2000 * HOUR
    memory.record_texts(["Ines keeps the spare lighthouse key under the blue stone."], 0.1)
    clock.now += 1000 * HOUR
    for n in range(60):
        memory.record_texts([f"The lighthouse had visitors on day {n}."], 0.9)
    clock.now += 1000 * HOUR
    return memory, clock


def test_a_specific_query_is_not_buried_by_recency_and_importance() -> None:
    memory, _ = _memory()
    top = memory.retrieve_lexical("where is the spare lighthouse key?", 3)
    assert top[0].entry.text.startswith("Ines keeps the spare lighthouse key")
    # A query about what many memories share still ranks by all three.
    common = memory.retrieve_lexical("lighthouse", 3)
    assert all("visitors" in r.entry.text for r in common)


def test_without_relevance_first_the_old_memory_is_buried() -> None:
    memory, _ = _memory(LongTermConfig(specific_share=0.0))
    top = memory.retrieve_lexical("where is the spare lighthouse key?", 3)
    assert not any(r.entry.text.startswith("Ines") for r in top)


def test_reciprocal_rank_fusion_sums_reciprocal_ranks() -> None:
    fused = reciprocal_rank_fusion([{"a": 9.0, "b": 1.0}, {"b": 0.9, "c": 0.5}], k=1)
    assert fused == pytest.approx({"a": 1 / 2, "b": 1 / 3 + 1 / 2, "c": 1 / 3})


@pytest.mark.anyio
async def test_embeddings_and_words_are_fused() -> None:
    with OpenAIStub(embed=embed) as server:
        memory = LongTermMemory(LongTermConfig(embedding_base_url=server.base_url))
        try:
            memory.record_texts(
                [
                    "Lena bought a red car last spring.",  # the concept, not the word
                    "The automobile museum opens on Sunday.",  # the word
                    "Our kitten sleeps on the stove.",
                ],
                0.5,
            )
            top = await memory.retrieve("automobile", 2)
            assert {r.entry.text[:4] for r in top} == {"Lena", "The "}
            assert memory.retrieve_lexical("automobile", 2)[0].entry.text.startswith("The auto")
        finally:
            await memory.aclose()


def test_a_recorded_message_keeps_when_it_was_said_and_an_estimated_importance() -> None:
    memory = LongTermMemory()
    said = 1_600_000_000.0
    (entry,) = memory.record(
        [Message(role="user", name="Anna", content="I moved to Berlin in 2021.", timestamp=said)]
    )
    assert entry.said == said and entry.importance > 0.5
    (chat,) = memory.record([Message(role="user", content="Thanks!")])
    assert chat.importance < 0.5
    plain = LongTermMemory(LongTermConfig(estimate_importance=False, default_importance=0.4))
    assert plain.record_texts(["I moved to Berlin in 2021."])[0].importance == 0.4
