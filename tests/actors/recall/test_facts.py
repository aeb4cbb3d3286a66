"""Fact extraction on record() through the loopback chat server: facts with their
sources, duplicates refresh, failures keep the messages."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
import structlog

from actormem.actors import AppConfig, MemoryRuntime
from actormem.actors.messages import Message
from actormem.actors.recall.facts import FactExtractionError, parse_answer
from actormem.actors.recall.longterm import LongTermConfig, LongTermMemory
from actormem.runtime import Transport
from tests.support.openai_server import OpenAIStub

pytestmark = pytest.mark.anyio


def _facts(body: dict[str, Any]) -> str:
    """Answer with one fact per message that mentions a number, sourced to it."""
    prompt = body["messages"][-1]["content"]
    lines = prompt.split("Messages:\n", 1)[1].splitlines()
    facts = []
    for line in lines:
        number, _, rest = line.partition(". ")
        speaker, _, text = rest.partition("] ")
        if any(c.isdigit() for c in text):
            facts.append({"text": f"{speaker.strip('[')} said: {text}", "sources": [int(number)]})
    return json.dumps({"facts": facts})


def _turns() -> list[Message]:
    return [
        Message(role="user", name="Anna", content="Hi there!"),
        Message(role="user", name="Anna", content="I moved to Berlin in 2021."),
        Message(role="user", name="Tom", content="My door code is 4471.", importance=0.9),
    ]


async def test_record_keeps_the_facts_the_model_extracts_with_their_sources() -> None:
    with OpenAIStub(reply=_facts) as server:
        memory = LongTermMemory(LongTermConfig(facts_base_url=server.base_url, facts_model="m"))
        try:
            turns = _turns()
            added = await memory.record_messages(turns)
            assert [e.text for e in added] == [
                "Anna said: I moved to Berlin in 2021.",
                "Tom said: My door code is 4471.",
            ]
            assert [e.source_message_ids for e in added] == [(turns[1].id,), (turns[2].id,)]
            assert [e.speaker for e in added] == ["Anna", "Tom"]
            assert added[1].importance == 0.9  # the source's own importance
            # Again: the model sees them as known, and repeating them adds nothing.
            assert await memory.record_messages(turns) == []
            assert (
                "Anna said: I moved to Berlin in 2021."
                in server.bodies[-1]["messages"][-1]["content"].split("Messages:")[0]
            )
            assert len(memory) == 2
            top = await memory.retrieve("Where did Anna move?", 1)
            assert top[0].entry.source_message_ids == (turns[1].id,)
        finally:
            await memory.aclose()


async def test_a_failed_extraction_records_the_messages_and_rests() -> None:
    with OpenAIStub(reply=_facts, mode="500") as server:
        config = LongTermConfig(facts_base_url=server.base_url, facts_retry_after=60)
        memory = LongTermMemory(config)
        memory.extractor._client.max_retries = 0  # type: ignore[union-attr]
        try:
            with structlog.testing.capture_logs() as logs:
                added = await memory.record_messages(_turns())
            assert [e.text for e in added] == [m.text() for m in _turns()]
            assert [e["event"] for e in logs] == ["longterm_fact_extraction_failed"]
            calls = server.requests
            await memory.record_messages([Message(role="user", content="Another 5 things.")])
            assert server.requests == calls  # resting: no request
        finally:
            await memory.aclose()


@pytest.mark.parametrize("content", ["not json", '{"facts": "none"}', '{"other": []}', None])
def test_an_answer_without_a_facts_list_is_an_error(content: str | None) -> None:
    with pytest.raises(FactExtractionError, match="did not answer with facts"):
        parse_answer(content, 3)


def test_sources_out_of_range_are_dropped_and_fences_are_read() -> None:
    answer = '```json\n{"facts": [{"text": " A fact. ", "sources": [0, 2, 9]}, {"text": ""}]}\n```'
    [fact] = parse_answer(answer, 3)
    assert (fact.text, fact.sources) == ("A fact.", (1,))


async def test_record_through_the_handle_extracts_facts(
    make_transport: Callable[[], Transport],
) -> None:
    with OpenAIStub(reply=_facts) as server:
        longterm = LongTermConfig(facts_base_url=server.base_url)
        config = msgspec.structs.replace(AppConfig(), longterm=longterm)
        async with MemoryRuntime(config, transport=make_transport()) as rt:
            anna = rt.memory("anna")
            assert await anna.record(_turns()) == 2
            found = await anna.retrieve("door code", 1)
            assert found[0].entry.text == "Tom said: My door code is 4471."
