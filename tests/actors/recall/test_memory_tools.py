"""Agent control: the record_to_memory / retrieve_from_memory tool schemas and handlers."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from actormem.actors.conversation import check_openai_messages
from actormem.actors.messages import Message, ToolCall
from actormem.actors.recall.longterm import ControlMode, LongTermMemory
from actormem.actors.recall.tools import (
    MEMORY_TOOLS,
    RECORD_TOOL,
    RETRIEVE_TOOL,
    ToolArgumentsError,
    handle_memory_tool_call,
    handle_record_to_memory,
    handle_retrieve_from_memory,
    memory_tool_message,
    memory_tools,
)

JSON_TYPES = {"object", "array", "string", "number", "integer", "boolean", "null"}


def _check_schema(node: dict[str, Any]) -> None:
    """A JSON Schema subset check: types known, objects closed, required keys declared."""
    assert node["type"] in JSON_TYPES
    if node["type"] == "object":
        props = node["properties"]
        assert set(node.get("required", ())) <= set(props)
        assert node["additionalProperties"] is False
        for sub in props.values():
            assert isinstance(sub.get("description"), str) and sub["description"]
            _check_schema(sub)
    if node["type"] == "array":
        _check_schema(node["items"])
        assert 1 <= node["minItems"] <= node["maxItems"]
    if node["type"] in ("number", "integer") and "minimum" in node:
        assert node["minimum"] <= node["maximum"]


@pytest.mark.parametrize("tool", MEMORY_TOOLS)
def test_tool_schemas_have_valid_shapes(tool: dict[str, Any]) -> None:
    assert json.loads(json.dumps(tool)) == tool  # plain JSON
    assert tool["type"] == "function"
    fn = tool["function"]
    assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", fn["name"])
    assert fn["description"]
    _check_schema(fn["parameters"])


def test_tools_offered_per_mode() -> None:
    assert memory_tools(ControlMode.STATIC_CONTROL) == []
    names = ["record_to_memory", "retrieve_from_memory"]
    for mode in (ControlMode.AGENT_CONTROL, ControlMode.BOTH):
        assert [t["function"]["name"] for t in memory_tools(mode)] == names


@pytest.mark.anyio
async def test_record_then_retrieve_through_the_handlers() -> None:
    memory = LongTermMemory()
    result = await handle_record_to_memory(
        memory,
        '{"thinking": "useful later", "content": ["The ferry leaves at 7.", '
        '"Anna likes lilies."], "importance": 0.8}',
    )
    assert result == "Recorded 2 item(s) to long-term memory."
    again = await handle_record_to_memory(memory, {"content": ["the ferry leaves at 7"]})
    assert "0 item(s)" in again and "1 already known" in again
    found = await handle_retrieve_from_memory(memory, '{"keywords": ["ferry"], "limit": 3}')
    assert found.startswith('Memories matching "ferry"')
    assert '"The ferry leaves at 7."' in found and "lilies" not in found
    none = await handle_retrieve_from_memory(memory, {"keywords": ["volcano"]})
    assert none == 'No memories match "volcano".'


BAD_RECORD = [
    ("{}", "missing required field `content`"),
    ('{"content": []}', "length >= 1"),
    ('{"content": "one fact"}', "Expected `array`, got `str` - at `$.content`"),
    ('{"content": [""]}', "at `$.content[0]`"),
    ('{"content": ["x"], "importance": 2}', "<= 1"),
    ('{"content": ["x"], "colour": "red"}', "unknown field `colour`"),
    ('{"content": ["x"', "not a JSON object"),
    (json.dumps({"content": ["x"] * 21}), "length <= 20"),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("arguments", "reason"), BAD_RECORD)
async def test_record_rejects_bad_arguments(arguments: str, reason: str) -> None:
    memory = LongTermMemory()
    with pytest.raises(ToolArgumentsError, match=re.escape(reason)) as info:
        await handle_record_to_memory(memory, arguments)
    assert str(info.value).startswith("record_to_memory: ")
    assert len(memory) == 0


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ("{}", "missing required field `keywords`"),
        ('{"keywords": ["a"], "limit": 0}', ">= 1"),
        ('{"keywords": ["a"], "limit": "3"}', "Expected `int`"),
        ("[1, 2]", "Expected `object`, got `array`"),
    ],
)
async def test_retrieve_rejects_bad_arguments(arguments: str, reason: str) -> None:
    with pytest.raises(ToolArgumentsError, match=re.escape(reason)):
        await handle_retrieve_from_memory(LongTermMemory(), arguments)


@pytest.mark.anyio
async def test_tool_call_dispatch_and_tool_message_keep_the_conversation_valid() -> None:
    memory = LongTermMemory()
    good = ToolCall(id="c1", name="record_to_memory", arguments='{"content": ["x is 1"]}')
    bad = ToolCall(id="c2", name="retrieve_from_memory", arguments='{"keywords": 3}')
    assert "Recorded 1" in await handle_memory_tool_call(memory, good)
    with pytest.raises(ToolArgumentsError, match="not a memory tool"):
        await handle_memory_tool_call(memory, ToolCall(id="c3", name="rm_rf"))
    assistant = Message(role="assistant", content=None, tool_calls=(good, bad))
    replies = [await memory_tool_message(memory, c) for c in (good, bad)]
    assert replies[1].text().startswith("error: retrieve_from_memory: invalid arguments")
    convo = [Message(role="user", content="remember x"), assistant, *replies]
    assert check_openai_messages([m.to_openai() for m in convo]) == []


def test_schema_limits_match_the_handlers() -> None:
    record = RECORD_TOOL["function"]["parameters"]["properties"]
    retrieve = RETRIEVE_TOOL["function"]["parameters"]["properties"]
    assert record["content"]["maxItems"] == 20 and retrieve["limit"]["maximum"] == 20
