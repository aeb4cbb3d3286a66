"""The three control modes, driven the way the agent memory actor drives them."""

from __future__ import annotations

import pytest

from actormem.actors.conversation import check_openai_messages
from actormem.actors.messages import Message, ToolCall
from actormem.actors.recall.longterm import (
    MEMORIES_TAG,
    ControlMode,
    LongTermConfig,
    LongTermMemory,
)
from actormem.actors.recall.tools import LongTermControl
from actormem.runtime.tokens import get_counter

TURN = [
    Message(role="user", content="Remember: the ferry to Osterholm leaves at seven."),
    Message(role="assistant", content="Got it, the Osterholm ferry leaves at seven."),
]
RECORD_CALL = ToolCall(
    id="c1", name="record_to_memory", arguments='{"content": ["The mill key is under the mat."]}'
)
RETRIEVE_CALL = ToolCall(id="c2", name="retrieve_from_memory", arguments='{"keywords": ["mill"]}')
OTHER_CALL = ToolCall(id="c3", name="get_weather", arguments="{}")


def _control(mode: str) -> LongTermControl:
    return LongTermControl(LongTermMemory(LongTermConfig(mode=ControlMode(mode))))


@pytest.mark.anyio
async def test_static_control_records_after_replies_and_injects_a_block() -> None:
    control = _control("static_control")
    assert control.tools() == []
    assert control.after_reply(TURN) == 2
    block = await control.context_block("when does the ferry leave?", get_counter())
    assert block is not None and block.startswith(f"<{MEMORIES_TAG}>") and "Osterholm" in block
    refused = await control.answer(RECORD_CALL)
    assert refused is not None and "not available" in refused.text()
    assert len(control.memory) == 2  # the refused call recorded nothing


@pytest.mark.anyio
async def test_agent_control_leaves_it_to_the_tools() -> None:
    control = _control("agent_control")
    assert [t["function"]["name"] for t in control.tools()] == [
        "record_to_memory",
        "retrieve_from_memory",
    ]
    assert control.after_reply(TURN) == 0
    assert await control.context_block("ferry", get_counter()) is None
    recorded = await control.answer(RECORD_CALL)
    found = await control.answer(RETRIEVE_CALL)
    assert recorded is not None and found is not None
    assert "Recorded 1" in recorded.text() and "mill key" in found.text()
    assert await control.answer(OTHER_CALL) is None  # not a memory tool: someone else's
    convo = [
        Message(role="user", content="note the key"),
        Message(role="assistant", content=None, tool_calls=(RECORD_CALL, RETRIEVE_CALL)),
        recorded,
        found,
    ]
    assert check_openai_messages([m.to_openai() for m in convo]) == []


@pytest.mark.anyio
async def test_both_does_both() -> None:
    control = _control("both")
    assert len(control.tools()) == 2
    assert control.after_reply(TURN) == 2
    assert await control.answer(RECORD_CALL) is not None
    block = await control.context_block("ferry and the mill key", get_counter())
    assert block is not None and "Osterholm" in block and "mill key" in block
