"""Microsoft Agent Framework's own agent loop, with a scripted chat client, on an
agent's memory: the history provider stores every run with its function calls and
results paired and gives the next run the memory's context; the context provider
adds received insights and long-term memories and records each exchange."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest
from agent_framework import (
    Agent,
    BaseChatClient,
    ChatResponse,
    Content,
    FunctionInvocationLayer,
    InMemoryHistoryProvider,
    Message,
    tool,
)

from actormem import ContextBudgetError, MemoryHandle, MemoryInputError, MemoryRuntime
from actormem.actors import AppConfig, MemoryConfig
from actormem.actors.conversation import check_openai_messages
from actormem.actors.integrations.agent_framework import (
    ActormemContextProvider,
    ActormemHistoryProvider,
    from_openai,
    to_openai,
)
from actormem.runtime import LocalTransport, Transport

pytestmark = pytest.mark.anyio

#: Two turns: a question answered through a tool call, then a thank-you.
TURNS = ["user", "assistant", "tool", "assistant", "user", "assistant"]


class ScriptedClient(FunctionInvocationLayer[Any], BaseChatClient[Any]):
    """A chat client that answers with the next scripted message and keeps what it
    was sent (the framework runs the function calls it asks for)."""

    def __init__(self, *replies: Message) -> None:
        super().__init__()
        self.replies = list(replies)
        self.sent: list[list[Message]] = []

    async def _reply(self, messages: Sequence[Message]) -> ChatResponse[Any]:
        self.sent.append(list(messages))
        return ChatResponse(messages=[self.replies.pop(0)])

    def _inner_get_response(  # type: ignore[override]
        self, *, messages: Sequence[Message], stream: bool, options: Any, **kwargs: Any
    ) -> Awaitable[ChatResponse[Any]]:
        return self._reply(messages)


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def calls(city: str, call_id: str) -> Message:
    return Message(
        "assistant", [Content.from_function_call(call_id, "weather", arguments={"city": city})]
    )


def says(text: str) -> Message:
    return Message("assistant", [text])


def shape(messages: Sequence[Message]) -> list[tuple[str, list[str]]]:
    return [(m.role, [c.type for c in m.contents]) for m in messages]


async def test_a_conversation_with_a_tool_call_lands_in_memory_paired(
    local_rt: MemoryRuntime,
) -> None:
    memory = local_rt.memory("alice")
    client = ScriptedClient(calls("Paris", "c1"), says("Sunny in Paris."), says("Goodbye."))
    agent = Agent(
        client=client,
        name="alice",
        instructions="You are helpful.",
        tools=[weather],
        context_providers=[ActormemHistoryProvider(memory)],
    )
    session = agent.create_session()
    assert (await agent.run("Weather in Paris?", session=session)).text == "Sunny in Paris."
    assert (await agent.run("Thanks!", session=session)).text == "Goodbye."

    stored = [m.to_openai() for m in await memory.get()]
    assert [m["role"] for m in stored] == TURNS
    assert stored[1]["tool_calls"][0]["id"] == "c1"
    assert stored[1]["tool_calls"][0]["function"]["name"] == "weather"
    assert stored[2] == {"role": "tool", "tool_call_id": "c1", "content": "sunny in Paris"}
    assert check_openai_messages(await memory.context()) == []
    # The second turn's model call got the first turn back from the memory, paired.
    assert shape(client.sent[-1]) == [
        ("user", ["text"]),
        ("assistant", ["function_call"]),
        ("tool", ["function_result"]),
        ("assistant", ["text"]),
        ("user", ["text"]),
    ]
    assert client.sent[-1][2].contents[0].call_id == "c1"


async def test_a_restarted_worker_goes_on_from_redis(
    make_redis_transport: Callable[[], Transport],
) -> None:
    def alice(memory: MemoryHandle, *replies: Message) -> tuple[Agent, ScriptedClient]:
        client = ScriptedClient(*replies)
        provider = ActormemHistoryProvider(memory)
        return Agent(client=client, tools=[weather], context_providers=[provider]), client

    async with MemoryRuntime(AppConfig(), transport=make_redis_transport()) as rt:
        agent, _ = alice(rt.memory("alice"), calls("Paris", "c1"), says("Sunny in Paris."))
        await agent.run("Weather in Paris?", session=agent.create_session())

    async with MemoryRuntime(AppConfig(), transport=make_redis_transport()) as rt:
        memory = rt.memory("alice")
        agent, client = alice(memory, says("Goodbye."))
        assert (await agent.run("Thanks!", session=agent.create_session())).text == "Goodbye."
        assert shape(client.sent[0])[:4] == [
            ("user", ["text"]),
            ("assistant", ["function_call"]),
            ("tool", ["function_result"]),
            ("assistant", ["text"]),
        ]
        assert client.sent[0][2].contents[0].call_id == "c1"
        assert [m.role for m in await memory.get()] == TURNS


async def test_each_run_gets_the_context_within_budget_with_calls_next_to_results(
    local_rt: MemoryRuntime,
) -> None:
    memory = local_rt.memory("alice")
    await memory.add({"role": "system", "content": "You are Alice."})
    client = ScriptedClient(
        *[m for i in range(4) for m in (calls(f"city{i}", f"c{i}"), says(f"Done {i} " * 30))],
        says("ok"),
    )
    agent = Agent(
        client=client,
        tools=[weather],
        context_providers=[ActormemHistoryProvider(memory, max_tokens=300)],
    )
    session = agent.create_session()
    for i in range(4):
        await agent.run(f"Weather in city{i}? " * 5, session=session)
    await agent.run("And now?", session=session)

    sent = client.sent[-1]
    assert sent[0].role == "system" and sent[0].text == "You are Alice."
    assert sent[-1].text == "And now?"
    assert len(sent) < 1 + 4 * 4 + 1  # older turns left out of the budget
    assert check_openai_messages(to_openai(sent)) == []
    assert await memory.size() == 1 + 4 * 4 + 2  # nothing left out of the memory


async def test_the_history_brings_insights_as_quoted_data(local_rt: MemoryRuntime) -> None:
    alice, bob = local_rt.memory("alice"), local_rt.memory("bob")
    await bob.subscribe("harbour")
    await alice.share("The ferry leaves at 7:40 from pier 3.", "harbour", 0.8)
    client = ScriptedClient(says("At 7:40."))
    agent = Agent(client=client, context_providers=[ActormemHistoryProvider(bob)])
    await agent.run("When does the ferry leave?", session=agent.create_session())
    quoted = [m for m in client.sent[0] if "7:40" in m.text]
    assert [m.role for m in quoted] == ["user"]
    assert quoted[0].text.startswith("<shared_insights>")


async def test_the_context_provider_recalls_and_records(local_rt: MemoryRuntime) -> None:
    alice, bob = local_rt.memory("alice"), local_rt.memory("bob")
    await bob.subscribe("harbour")
    await alice.share("The ferry leaves at 7:40 from pier 3.", "harbour", 0.8)
    recall = ActormemContextProvider(bob)
    client = ScriptedClient(says("The blue boat is Nora's."), says("Nora's."))
    agent = Agent(
        client=client, context_providers=[InMemoryHistoryProvider(), recall]
    )  # the history stays in the framework here
    await agent.run("Whose is the blue boat at the ferry?", session=agent.create_session())
    first = [m for m in client.sent[0] if m.role == "user" and "7:40" in m.text]
    assert len(first) == 1 and '"The ferry leaves at 7:40 from pier 3."' in first[0].text
    assert await bob.size() == 0  # recalled and recorded, not stored as history
    assert any("blue boat" in r.entry.text for r in await bob.retrieve("blue boat"))

    # A new session starts empty in the framework, but the memory remembers.
    await agent.run("Tell me about the blue boat.", session=agent.create_session())
    again = [m for m in client.sent[1] if m.role == "user" and "<long_term_memory>" in m.text]
    assert len(again) == 1 and "Nora" in again[0].text


async def test_a_run_that_cannot_fit_the_budget_fails_and_stores_nothing(
    local_rt: MemoryRuntime,
) -> None:
    memory = local_rt.memory("alice")
    await memory.add({"role": "user", "content": "a long question " * 50})
    agent = Agent(
        client=ScriptedClient(says("never")),
        context_providers=[ActormemHistoryProvider(memory, max_tokens=20)],
    )
    with pytest.raises(ContextBudgetError, match="max_tokens is 20"):
        await agent.run("hi", session=agent.create_session())
    assert await memory.size() == 1


async def test_a_message_the_memory_refuses_fails_the_run_and_stores_nothing() -> None:
    config = AppConfig(memory=MemoryConfig(max_message_chars=100))
    async with MemoryRuntime(config, transport=LocalTransport()) as rt:
        memory = rt.memory("alice")
        agent = Agent(
            client=ScriptedClient(says("not stored"), says("fine")),
            context_providers=[ActormemHistoryProvider(memory)],
        )
        with pytest.raises(MemoryInputError, match="the limit is 100"):
            await agent.run("a long question " * 20, session=agent.create_session())
        assert await memory.size() == 0
        # The memory is the agent's whatever the session: a new one goes on from it.
        await agent.run("short", session=agent.create_session())
        assert [m.text() for m in await memory.get()] == ["short", "fine"]


def test_messages_convert_both_ways_with_call_ids() -> None:
    messages = [
        Message("user", ["hi"], author_name="sam"),
        Message(
            "assistant", ["let me look", Content.from_function_call("k", "weather", arguments="{}")]
        ),
        Message("tool", [Content.from_function_result("k", result={"sky": "clear"})]),
    ]
    openai = to_openai(messages)
    assert openai[0] == {"role": "user", "content": "hi", "name": "sam"}
    assert openai[1]["content"] == "let me look" and openai[1]["tool_calls"][0]["id"] == "k"
    assert openai[2] == {"role": "tool", "tool_call_id": "k", "content": '{"sky": "clear"}'}
    back = from_openai(
        [
            {"role": "user", "content": "hi", "name": "sam"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "k", "type": "function", "function": {"name": "w", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "k", "content": "clear"},
        ]
    )
    assert shape(back) == [
        ("user", ["text"]),
        ("assistant", ["function_call"]),
        ("tool", ["function_result"]),
    ]
    assert back[0].author_name == "sam" and back[2].contents[0].call_id == "k"
