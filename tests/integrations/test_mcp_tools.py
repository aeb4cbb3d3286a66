"""The MCP server's memory tools, through the ``mcp`` client library in process, on
both transports: every tool does what the handle does, and a refused call comes
back as a tool error with the handle's own message, changing nothing."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import structlog
from mcp import Client

from actormem import ContextBudgetError, MemoryHandle, MemoryInputError, MemoryRuntime
from actormem.actors.integrations.mcp import mcp_server
from actormem.actors.integrations.memory_tools import TOOLS, MemoryTools

pytestmark = pytest.mark.anyio


@pytest.fixture
async def client(memory_rt: MemoryRuntime) -> AsyncIterator[Client]:
    async with Client(mcp_server(memory_rt)) as connected:
        yield connected


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    # The text is the same JSON, for clients that read only text.
    assert json.loads(result.content[0].text) == result.structured_content  # type: ignore[union-attr]
    return result.structured_content


async def refused(client: Client, tool: str, **arguments: Any) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    text: str = result.content[0].text  # type: ignore[union-attr]
    return text


async def test_every_tool_acts_on_the_named_agents_memory(
    client: Client, memory_rt: MemoryRuntime
) -> None:
    listed = await client.list_tools()
    assert [t.name for t in listed.tools] == list(TOOLS)
    assert all(t.input_schema["required"][0] == "agent" for t in listed.tools)
    forget = next(t for t in listed.tools if t.name == "forget_agent")
    assert forget.annotations is not None and forget.annotations.destructive_hint
    hints = {t.name: t.annotations.read_only_hint for t in listed.tools if t.annotations}
    assert hints["get_context"] and hints["search_messages"] and not hints["add_messages"]

    added = await call(
        client,
        "add_messages",
        agent="alice",
        messages=[
            {"role": "system", "content": "You are Alice."},
            {"role": "user", "content": "The spare key is under the blue mat."},
            {
                "role": "assistant",
                "tool_calls": [{"id": "c1", "name": "lookup", "arguments": "{}"}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "lookup done"},
        ],
    )
    assert added["size"] == 4 and len(added["ids"]) == 4
    context = (await call(client, "get_context", agent="alice", max_tokens=500))["messages"]
    assert context == await memory_rt.memory("alice").context(500)
    assert context[0] == {"role": "system", "content": "You are Alice."}
    found = await call(client, "search_messages", agent="alice", query="BLUE mat")
    assert [m["id"] for m in found["messages"]] == [added["ids"][1]]
    assert (await call(client, "search_messages", agent="bob", query="mat"))["messages"] == []

    fact = {"role": "user", "content": "Alice's birthday is on the 3rd of May."}
    assert (await call(client, "record_memories", agent="alice", messages=[fact]))["recorded"] == 1
    memories = (await call(client, "retrieve_memories", agent="alice", query="birthday"))[
        "memories"
    ]
    assert "3rd of May" in memories[0]["entry"]["text"]

    shared = await call(client, "share_insight", agent="alice", insight="The bakery opens at 7.")
    assert shared["status"] == "new" and shared["insight"]["source"] == "alice"

    closed = (await call(client, "start_episode", agent="alice", metadata={"topic": "keys"}))[
        "closed"
    ]
    assert closed["messages"][1]["id"] == added["ids"][1]
    recalled = (await call(client, "recall_episodes", agent="alice", query="spare key"))["episodes"]
    assert [e["id"] for e in recalled] == [closed["id"]]
    assert len((await call(client, "summarize_episodes", agent="alice"))["summaries"]) == 1

    summary = await memory_rt.memory("alice").set_summary("a key", replaces=[added["ids"][1]])
    reload_id = summary.metadata["reload_id"]
    reloaded = await call(client, "reload_offload", agent="alice", offload_id=reload_id)
    assert [m["content"] for m in reloaded["messages"]] == ["The spare key is under the blue mat."]

    assert (await call(client, "forget_agent", agent="alice"))["erased"] >= 4
    assert await memory_rt.memory("alice").size() == 0


Handle = Callable[[MemoryHandle], Awaitable[Any]]

#: (tool, arguments, the same call on the handle): each is refused by the handle.
SAME_AS_THE_HANDLE: list[tuple[str, dict[str, Any], Handle]] = [
    (
        "add_messages",
        {"messages": [{"role": "robot", "content": "beep"}]},
        lambda m: m.add([{"role": "robot", "content": "beep"}]),
    ),
    (
        "add_messages",
        {"messages": [{"role": "user", "content": "x", "importance": 2}]},
        lambda m: m.add([{"role": "user", "content": "x", "importance": 2}]),
    ),
    (
        "search_messages",
        {"query": "x", "mode": "fuzzy"},
        lambda m: m.search("x", mode="fuzzy"),
    ),
    ("search_messages", {"query": "x", "k": "many"}, lambda m: m.search("x", k="many")),  # type: ignore[arg-type]
    ("get_context", {"max_tokens": 5}, lambda m: m.context(5)),
    ("retrieve_memories", {"query": 7}, lambda m: m.retrieve(7)),  # type: ignore[arg-type]
    ("share_insight", {"insight": ""}, lambda m: m.share("")),
    ("reload_offload", {"offload_id": "no-such"}, lambda m: m.reload("no-such")),
]


async def test_a_refused_call_is_a_tool_error_with_the_handles_message(
    client: Client, memory_rt: MemoryRuntime
) -> None:
    memory = memory_rt.memory("carol")
    await memory.add(
        [{"role": "system", "content": "Carol. " * 20}, {"role": "user", "content": "hi"}]
    )
    for tool, arguments, on_handle in SAME_AS_THE_HANDLE:
        with pytest.raises(MemoryInputError) as caught:
            await on_handle(memory)
        text = await refused(client, tool, agent="carol", **arguments)
        assert text == f"{type(caught.value).__name__}: {caught.value}", tool
        # Nothing changed, and the server goes on serving.
        assert await memory.size() == 2
        assert (await call(client, "search_messages", agent="carol", query="hi"))["messages"]


async def test_a_context_that_cannot_fit_says_how_many_tokens_it_needs(client: Client) -> None:
    await call(
        client, "add_messages", agent="dan", messages=[{"role": "user", "content": "hi " * 50}]
    )
    text = await refused(client, "get_context", agent="dan", max_tokens=10)
    assert text.startswith(f"{ContextBudgetError.__name__}: ") and "needs" in text


async def test_arguments_the_tool_does_not_take_are_named(client: Client) -> None:
    assert await refused(client, "search_messages", agent="a", quer="x") == (
        "MemoryInputError: search_messages: unknown argument 'quer' "
        "(it takes agent, query, mode, k, roles, scope)"
    )
    assert await refused(client, "search_messages", agent="a") == (
        "MemoryInputError: search_messages: missing argument 'query'"
    )
    assert await refused(client, "forget_agent", query="x") == (
        "MemoryInputError: forget_agent: unknown argument 'query' (it takes agent)"
    )
    assert "agent must be a string" in await refused(client, "forget_agent", agent=3)
    assert "agent name" in await refused(client, "forget_agent", agent=" ")
    assert "metadata must be an object" in await refused(
        client, "start_episode", agent="a", metadata=[1]
    )


async def test_a_server_for_one_agent_takes_no_agent_argument(memory_rt: MemoryRuntime) -> None:
    async with Client(mcp_server(memory_rt, agent="erin")) as client:
        listed = await client.list_tools()
        assert all("agent" not in t.input_schema["properties"] for t in listed.tools)
        await call(client, "add_messages", messages=[{"role": "user", "content": "hello"}])
        assert "unknown argument 'agent'" in await refused(client, "forget_agent", agent="frank")
    assert await memory_rt.memory("erin").size() == 1


async def test_a_bad_agent_name_is_refused_when_the_server_is_built() -> None:
    with pytest.raises(MemoryInputError, match="agent name"):
        mcp_server(MemoryRuntime(), agent="")


async def test_a_session_bound_to_an_agent_acts_on_it_only(memory_rt: MemoryRuntime) -> None:
    tools = MemoryTools(memory_rt)
    note = {"role": "user", "content": "hello"}
    await tools.call("add_messages", {"messages": [note]}, session_agent="gil")
    assert await memory_rt.memory("gil").size() == 1
    with pytest.raises(MemoryInputError, match="unknown argument 'agent'"):
        await tools.call("forget_agent", {"agent": "hal"}, session_agent="gil")
    with pytest.raises(MemoryInputError, match="serves agent 'ivy' only, not 'gil'"):
        await MemoryTools(memory_rt, agent="ivy").call("forget_agent", {}, session_agent="gil")
    assert await memory_rt.memory("gil").size() == 1


async def test_a_failure_of_the_server_itself_is_a_tool_error_and_logged(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(memory: MemoryHandle, args: dict[str, Any]) -> Any:
        raise RuntimeError("a bug")

    tool = TOOLS["summarize_episodes"]
    monkeypatch.setitem(TOOLS, tool.name, dataclasses.replace(tool, run=broken))
    with structlog.testing.capture_logs() as logs:
        text = await refused(client, "summarize_episodes", agent="kim")
    assert text == "summarize_episodes: internal error (the server logged it)"
    assert [e["event"] for e in logs if e["log_level"] == "error"] == ["mcp_tool_failed"]
    assert (await call(client, "search_messages", agent="kim", query="x"))["messages"] == []
