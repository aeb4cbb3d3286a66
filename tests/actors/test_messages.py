"""The message model: validation, the OpenAI mapping, msgpack round trips."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actormem.actors import MemoryInputError, Message, ToolCall
from actormem.actors.messages import (
    count_tokens,
    decode_message,
    decode_messages,
    encode_message,
    encode_messages,
)


def test_ids_are_unique_and_time_ordered() -> None:
    ids = [Message(role="user", content=str(i)).id for i in range(1000)]
    assert len(set(ids)) == 1000
    assert ids == sorted(ids)


def test_msgpack_round_trip_keeps_every_field() -> None:
    m = Message(
        role="assistant",
        content={"plan": ["a", "b"], "n": 3},
        name="alice",
        tool_calls=(ToolCall("c1", "search", '{"q": "x"}'),),
        url=("https://example.invalid/a.png",),
        metadata={"important": True, "tags": ["x"]},
        importance=0.5,
        tokens=12,
    )
    assert decode_message(encode_message(m)) == m
    assert decode_messages(encode_messages([m, m])) == [m, m]


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"role": "tool", "content": "x"}, "needs the tool_call_id"),
        ({"role": "user", "content": "x", "tool_call_id": "c"}, "belongs on tool messages"),
        ({"role": "user"}, "needs content"),
        ({"role": "user", "content": "x", "importance": 2.0}, "within 0..1"),
        ({"role": "wizard", "content": "x"}, "role must be one of"),
        ({"role": "user", "content": 5}, "content must be text"),
    ],
)
def test_invalid_messages_are_refused_with_the_reason(fields: dict, reason: str) -> None:
    with pytest.raises(MemoryInputError, match=reason):
        Message(**fields)
    with pytest.raises(MemoryInputError, match="invalid message"):
        decode_message(msgspec.msgpack.encode(fields))


def test_tool_calls_only_on_assistant_and_unique() -> None:
    with pytest.raises(MemoryInputError, match="only assistant"):
        Message(role="user", content="x", tool_calls=(ToolCall("a", "f"),))
    with pytest.raises(MemoryInputError, match="appears twice"):
        Message(role="assistant", tool_calls=(ToolCall("a", "f"), ToolCall("a", "g")))


def test_to_openai_maps_roles_as_marsys_does() -> None:
    call = Message(role="agent_call", name="bob", content="Can you check the mill?")
    assert call.to_openai() == {
        "role": "user",
        "content": "[Request from bob]: Can you check the mill?",
    }
    answer = Message(role="agent_response", name="alice", content="On it.")
    assert answer.to_openai() == {"role": "assistant", "content": "On it.", "name": "alice"}
    tool = Message(role="tool", tool_call_id="c1", name="weather", content="sunny")
    assert tool.to_openai() == {"role": "tool", "content": "sunny", "tool_call_id": "c1"}


def test_to_openai_renders_tool_calls_structured_content_and_safe_names() -> None:
    m = Message(role="assistant", tool_calls=(ToolCall("c1", "f", '{"a": 1}'),), name="Dr. Who")
    out = m.to_openai()
    assert out["tool_calls"] == [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    ]
    assert out["content"] is None
    assert out["name"] == "Dr__Who"
    structured = Message(role="user", content={"k": [1, 2]})
    assert structured.to_openai()["content"] == '{"k":[1,2]}'
    parts = Message(role="user", content=[{"type": "text", "text": "look"}])
    assert parts.to_openai()["content"] == [{"type": "text", "text": "look"}]
    assert parts.text() == "look"


@settings(deadline=None)  # the first call loads the encoding
@given(
    role=st.sampled_from(["system", "user", "assistant", "agent_call", "agent_response"]),
    content=st.text(max_size=300),
    name=st.none() | st.text(min_size=1, max_size=80),
)
def test_the_fast_token_count_equals_the_rendered_one(
    role: str, content: str, name: str | None
) -> None:
    from actormem.runtime import get_counter

    counter = get_counter()
    m = Message(role=role, content=content or "x", name=name)  # type: ignore[arg-type]
    assert count_tokens(m, counter) == counter.count_message(m.to_openai())


def test_with_tokens_copies_without_touching_the_original() -> None:
    m = Message(role="user", content="hello")
    counted = m.with_tokens(7)
    assert (m.tokens, counted.tokens, counted.id, counted.content) == (-1, 7, m.id, "hello")
    assert counted.with_tokens(7) is counted
