"""AgentScope's own ReAct agent, with a scripted model, on an agent's memory: the
middleware adds every reply to the memory with each tool call next to its result,
brings received insights and long-term memories to the model, and a fresh agent
picks the conversation up from the memory."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from agentscope.agent import Agent
from agentscope.credential import CredentialBase
from agentscope.event import ConfirmResult, UserConfirmResultEvent
from agentscope.formatter import OpenAIChatFormatter
from agentscope.message import Msg, TextBlock, ToolCallBlock, UserMsg
from agentscope.model import ChatModelBase, ChatResponse
from agentscope.permission import PermissionBehavior, PermissionDecision
from agentscope.state import AgentState
from agentscope.tool import FunctionTool, Toolkit, ToolResponse
from pydantic import BaseModel

from actormem import MemoryHandle, MemoryInputError, MemoryRuntime
from actormem.actors import AppConfig, MemoryConfig
from actormem.actors.conversation import check_openai_messages
from actormem.actors.integrations.agentscope import ActormemMiddleware, to_openai
from actormem.runtime import LocalTransport, Transport

pytestmark = pytest.mark.anyio

#: Two turns: a question answered through a tool call, then a thank-you.
TURNS = ["user", "assistant", "tool", "assistant", "user", "assistant"]
TEXTS = ("question", "answer")


class ScriptedModel(ChatModelBase):
    """A chat model that answers with the next scripted blocks and keeps what it was
    sent, as the OpenAI formatter makes it."""

    class Parameters(BaseModel):
        pass

    def __init__(self, *replies: list[Any]) -> None:
        super().__init__(CredentialBase(), "scripted", self.Parameters(), stream=False)
        self.formatter = OpenAIChatFormatter()
        self.replies = list(replies)
        self.sent: list[list[dict[str, Any]]] = []

    async def _call_api(self, model_name: str, messages: list[Msg], *_: Any, **__: Any) -> Any:
        self.sent.append(await self.formatter.format(messages))
        return ChatResponse(content=self.replies.pop(0), is_last=True)


def weather(city: str) -> ToolResponse:
    """The weather in a city.

    Args:
        city (str): the city.
    """
    return f"sunny in {city}"  # type: ignore[return-value]  # AgentScope wraps text


def calls(city: str, call_id: str) -> list[Any]:
    return [ToolCallBlock(id=call_id, name="weather", input=json.dumps({"city": city}))]


def says(text: str) -> list[Any]:
    return [TextBlock(text=text)]


def make_agent(model: ScriptedModel, middleware: ActormemMiddleware) -> Agent:
    allowed = PermissionDecision(behavior=PermissionBehavior.ALLOW, message="allowed")
    return Agent(
        name="alice",
        system_prompt="You are helpful.",
        model=model,
        toolkit=Toolkit(tools=[FunctionTool(weather, permission=allowed)]),
        middlewares=[middleware],
    )


def ask(text: str) -> Msg:
    return UserMsg(name="user", content=text)


async def two_turns(memory: MemoryHandle) -> None:
    """Alice answers a question through a tool call, then a thank-you."""
    model = ScriptedModel(calls("Paris", "c1"), says("Sunny in Paris."), says("Goodbye."))
    agent = make_agent(model, ActormemMiddleware(memory))
    assert (await agent.reply(ask("Weather in Paris?"))).get_text_content() == "Sunny in Paris."
    assert (await agent.reply(ask("Thanks!"))).get_text_content() == "Goodbye."


async def test_a_react_run_with_a_tool_call_lands_in_memory_paired(
    local_rt: MemoryRuntime,
) -> None:
    memory = local_rt.memory("alice")
    await two_turns(memory)
    stored = [m.to_openai() for m in await memory.get()]
    assert [m["role"] for m in stored] == TURNS
    assert stored[1]["tool_calls"][0]["id"] == "c1"
    assert stored[2]["tool_call_id"] == "c1" and stored[2]["content"] == "sunny in Paris"
    assert "system-reminder" not in json.dumps(stored)  # runtime hints are not stored
    assert check_openai_messages(await memory.context()) == []


async def test_a_restarted_worker_picks_the_conversation_up_from_redis(
    make_redis_transport: Callable[[], Transport],
) -> None:
    async with MemoryRuntime(AppConfig(), transport=make_redis_transport()) as rt:
        await two_turns(rt.memory("alice"))

    async with MemoryRuntime(AppConfig(), transport=make_redis_transport()) as rt:
        memory = rt.memory("alice")
        later = ScriptedModel(says("You asked about Paris."))
        middleware = ActormemMiddleware(memory)
        fresh = make_agent(later, middleware)
        assert await middleware.restore(fresh) == 4  # one assistant message per reply
        await fresh.reply(ask("What did I ask?"))
        sent = [m for m in later.sent[0] if m["role"] != "system"]
        assert [m["role"] for m in sent[:4]] == TURNS[:4]
        assert sent[1]["tool_calls"][0]["id"] == sent[2]["tool_call_id"] == "c1"
        assert await memory.size() == 8  # the restored messages were not added twice


async def test_a_saved_and_loaded_agent_state_adds_nothing_twice(local_rt: MemoryRuntime) -> None:
    memory = local_rt.memory("alice")
    await two_turns(memory)
    middleware = ActormemMiddleware(memory, record=False)
    saved = make_agent(ScriptedModel(), middleware)
    await middleware.restore(saved)
    state = AgentState.model_validate_json(saved.state.model_dump_json())  # as stored

    loaded = Agent(
        name="alice",
        system_prompt="You are helpful.",
        model=ScriptedModel(says("Bye again.")),
        state=state,
        middlewares=[middleware],
    )
    await loaded.reply(ask("Bye!"))
    assert [m.text() for m in await memory.get()][-3:] == ["Goodbye.", "Bye!", "Bye again."]
    assert await memory.size() == len(TURNS) + 2


async def test_restore_fits_the_budget_and_keeps_calls_with_results(
    local_rt: MemoryRuntime,
) -> None:
    memory = local_rt.memory("alice")
    replies = [r for i in range(4) for r in (calls(f"city{i}", f"c{i}"), says(f"Done {i} " * 30))]
    agent = make_agent(ScriptedModel(*replies), ActormemMiddleware(memory))
    for i in range(4):
        await agent.reply(ask(f"Weather in city{i}? " * 5))
    assert await memory.size() == 16

    middleware = ActormemMiddleware(memory, max_tokens=250)
    fresh = make_agent(ScriptedModel(), middleware)
    kept = await middleware.restore(fresh)
    assert 0 < kept < 8
    assert check_openai_messages(await to_openai(fresh.state.context)) == []
    assert fresh.state.context[0].role == "user"  # a whole turn, never a cut pair


async def test_the_model_gets_insights_and_memories_as_quoted_data(
    local_rt: MemoryRuntime,
) -> None:
    alice, bob = local_rt.memory("alice"), local_rt.memory("bob")
    await alice.subscribe("harbour")
    await bob.share("The ferry leaves at 7:40 from pier 3.", "harbour", 0.8)
    model = ScriptedModel(says("The blue boat is Nora's."), says("Nora's."))
    agent = make_agent(model, ActormemMiddleware(alice))
    await agent.reply(ask("Whose is the blue boat at the ferry?"))
    quoted = [m for m in model.sent[0] if "7:40" in json.dumps(m)]
    assert [m["role"] for m in quoted] == ["user"]
    assert "<shared_insights>" in json.dumps(quoted[0])
    # The note went to the model only: the agent's state and the memory do not keep it.
    assert "7:40" not in json.dumps([m.model_dump() for m in agent.state.context])
    assert "7:40" not in json.dumps([m.to_openai() for m in await alice.get()])

    # The exchange was recorded: a later question recalls it.
    await agent.reply(ask("Tell me about the blue boat."))
    recalled = [m for m in model.sent[1] if "<long_term_memory>" in json.dumps(m)]
    assert len(recalled) == 1 and "Nora" in json.dumps(recalled[0])


async def test_a_reply_waiting_for_permission_is_added_once_it_ends(
    local_rt: MemoryRuntime,
) -> None:
    memory = local_rt.memory("alice")
    model = ScriptedModel(calls("Oslo", "c7"), says("Sunny in Oslo."))
    agent = Agent(  # the tool asks the user's permission (AgentScope's default)
        name="alice",
        system_prompt="You are helpful.",
        model=model,
        toolkit=Toolkit(tools=[FunctionTool(weather)]),
        middlewares=[ActormemMiddleware(memory, record=False)],
    )
    await agent.reply(ask("Weather in Oslo?"))
    (pending,) = agent.state.get_awaiting_tool_calls("alice")
    assert await memory.size() == 0  # the call has no result yet
    confirmed = ConfirmResult(confirmed=True, tool_call=pending)
    await agent.reply(
        UserConfirmResultEvent(reply_id=agent.state.reply_id, confirm_results=[confirmed])
    )
    stored = [m.to_openai() for m in await memory.get()]
    assert [m["role"] for m in stored] == TURNS[:4]
    assert stored[2]["tool_call_id"] == "c7" and stored[2]["content"] == "sunny in Oslo"


async def test_the_memory_operations_act_on_what_the_agent_said(local_rt: MemoryRuntime) -> None:
    # The cases of AgentScope 1's memory tests (add, get in order, marks, delete by
    # id and by mark, size, compressed summary, clear), on what the middleware added.
    memory = local_rt.memory("alice")
    model = ScriptedModel(*[says(f"answer {i}") for i in range(4)])
    agent = make_agent(model, ActormemMiddleware(memory, recall=False, record=False))
    for i in range(3):
        await agent.reply(ask(f"question {i}"))
    said = await memory.get()
    assert [m.text() for m in said] == [f"{kind} {i}" for i in range(3) for kind in TEXTS]
    ids = [m.id for m in said]

    await memory.mark(ids[0], todo=True)
    await memory.mark(ids[1], todo=True)
    await memory.unmark(ids[1], "todo")
    todo = [m.id for m in await memory.get(metadata={"todo": True})]
    assert todo == [ids[0]]
    assert await memory.delete(*todo) == 1
    assert await memory.size() == 5

    summary = await memory.set_summary("Alice was asked question 1.", replaces=ids[2:4])
    assert [m.id for m in await memory.get()] == [ids[1], summary.id, *ids[4:]]
    fresh = make_agent(ScriptedModel(), middleware := ActormemMiddleware(memory))
    await middleware.restore(fresh)
    assert "Alice was asked question 1." in json.dumps(await to_openai(fresh.state.context))
    history = {m.id for m in await memory.get(scope="history")}
    assert history >= set(ids)  # nothing said is lost

    assert await memory.clear() == 4
    assert await memory.size() == 0
    await agent.reply(ask("question 3"))  # only the new reply is added
    assert [m.text() for m in await memory.get()] == ["question 3", "answer 3"]


async def test_a_reply_the_memory_refuses_fails_and_stores_nothing() -> None:
    config = AppConfig(memory=MemoryConfig(max_message_chars=100))
    async with MemoryRuntime(config, transport=LocalTransport()) as rt:
        memory = rt.memory("alice")
        agent = make_agent(ScriptedModel(says("ok")), ActormemMiddleware(memory, record=False))
        with pytest.raises(MemoryInputError, match="the limit is 100"):
            await agent.reply(ask("a long question " * 20))
        assert await memory.size() == 0
