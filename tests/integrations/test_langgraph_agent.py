"""LangGraph's prebuilt ReAct agent with a scripted chat model, run turn after turn
through the memory: its conversation in the agent's memory (the model sees the
memory's context), its facts in the store; over Redis, all of it survives the
worker's crash."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    ToolMessage,
    convert_to_openai_messages,
)
from langchain_core.outputs import ChatResult
from langchain_core.tools import tool
from langgraph.prebuilt import InjectedStore, create_react_agent
from langgraph.store.base import BaseStore

from actormem import AppConfig, MemoryInputError, MemoryRuntime, RuntimeConfig
from actormem.actors import check_openai_messages
from actormem.actors.app.wiring import worker_env
from actormem.actors.integrations.langgraph import (
    MemoryStore,
    MessageHistory,
    to_langchain_messages,
    to_memory_messages,
)
from actormem.runtime.redis import RedisConfig
from actormem.runtime.redis.transport import RedisTransport
from actormem.runtime.redis.worker import WorkerProcesses

pytestmark = [
    pytest.mark.anyio,
    # The prebuilt agent's LangGraph 1.x deprecation notice (it points to langchain).
    pytest.mark.filterwarnings("ignore:create_react_agent has been moved"),
]

APP = "actormem.actors.app.wiring:worker_register"


class ScriptedModel(GenericFakeChatModel):
    """Replies from a script, and keeps every message list it was given."""

    seen: list[list[BaseMessage]] = []

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        self.seen.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


def call(name: str, call_id: str, **args: Any) -> AIMessage:
    return AIMessage("", tool_calls=[{"id": call_id, "name": name, "args": args}])


def script() -> Iterator[AIMessage]:
    """Three turns: learn a fact (a tool call), recall it (a tool call), thank."""
    yield call("remember", "c1", key="colour", fact="Ana's favourite colour is teal")
    yield AIMessage("Noted: teal.")
    yield call("recall", "c2", query="favourite colour")
    yield AIMessage("Your favourite colour is teal.")
    yield AIMessage("You are welcome.")


@tool
async def remember(key: str, fact: str, store: Annotated[BaseStore, InjectedStore()]) -> str:
    """Remember a fact about the user."""
    await store.aput(("ana", "facts"), key, {"fact": fact})
    return "saved"


@tool
async def recall(query: str, store: Annotated[BaseStore, InjectedStore()]) -> str:
    """Recall facts about the user."""
    found = await store.asearch(("ana", "facts"), query=query)
    return "; ".join(item.value["fact"] for item in found) or "nothing"


def agent(
    rt: MemoryRuntime, model: ScriptedModel, max_tokens: int | None = None, prompt: Any = None
) -> Any:
    history = MessageHistory(rt, max_tokens=max_tokens)
    return create_react_agent(
        model,
        [remember, recall],
        prompt=prompt,
        store=MemoryStore(rt),
        pre_model_hook=history.pre_model_hook,
        post_model_hook=history.post_model_hook,
    )


THREAD: Any = {"configurable": {"thread_id": "ana"}}
TURNS = ("My favourite colour is teal.", "What is my favourite colour?", "Thanks!")


async def turn(graph: Any, text: str) -> str:
    """One turn: only the new input goes in; the memory holds the rest."""
    out = await graph.ainvoke({"messages": [HumanMessage(text)]}, THREAD)
    reply: str = out["messages"][-1].content
    return reply


def valid(messages: list[BaseMessage]) -> bool:
    return not check_openai_messages(convert_to_openai_messages(messages))


async def test_a_react_agent_keeps_its_conversation_and_facts_in_memory(
    memory_rt: MemoryRuntime,
) -> None:
    model = ScriptedModel(messages=script())
    graph = agent(memory_rt, model, prompt="You are Ana's helper.")
    assert await turn(graph, TURNS[0]) == "Noted: teal."
    assert await turn(graph, TURNS[1]) == "Your favourite colour is teal."
    assert await turn(graph, TURNS[2]) == "You are welcome."

    # Each model call saw the prompt, then the memory's context: every earlier turn
    # with its tool call and result, always a valid list.
    assert all(valid(seen) for seen in model.seen)
    last = model.seen[-1]
    assert last[0].content == "You are Ana's helper."
    assert [m.type for m in last].count("system") == 1  # the prompt is not stored
    said = [m.content for m in last if m.type in ("human", "ai", "tool")]
    assert said == [
        TURNS[0],
        "",
        "saved",
        "Noted: teal.",
        TURNS[1],
        "",
        "Ana's favourite colour is teal",
        "Your favourite colour is teal.",
        TURNS[2],
    ]
    history = await memory_rt.memory("ana").get(scope="history")
    assert [m.role for m in history].count("tool") == 2 and history[-1].text() == (
        "You are welcome."
    )
    entry = await memory_rt.memory("ana").get_entry(("ana", "facts"), "colour")
    assert entry is not None and entry.value == {"fact": "Ana's favourite colour is teal"}


async def test_a_small_budget_trims_the_models_input_keeping_tool_pairs(
    memory_rt: MemoryRuntime,
) -> None:
    model = ScriptedModel(messages=script())
    graph = agent(memory_rt, model, max_tokens=60)
    for text in TURNS:
        await turn(graph, text)
    assert all(valid(seen) for seen in model.seen)
    # The last call saw only the newest messages, not the whole conversation.
    assert len(model.seen[-1]) < len(await memory_rt.memory("ana").get(scope="history"))
    assert model.seen[-1][-1].content == TURNS[2]


@pytest.mark.slow
async def test_the_conversation_and_facts_survive_a_worker_crash(
    redis_config: RedisConfig,
) -> None:
    config = AppConfig(redis=redis_config, runtime=RuntimeConfig(ask_timeout=30.0))
    model = ScriptedModel(messages=script())
    client = RedisTransport(redis_config.url, redis_config, worker=False)
    async with MemoryRuntime(config, transport=client) as rt:
        graph = agent(rt, model)
        async with WorkerProcesses(1, redis_config, APP, env=worker_env(config)) as workers:
            assert await turn(graph, TURNS[0]) == "Noted: teal."
            workers.kill(0)  # no cleanup: what it acknowledged is all in Redis
        async with WorkerProcesses(1, redis_config, APP, env=worker_env(config)):
            assert await turn(graph, TURNS[1]) == "Your favourite colour is teal."
    # The new worker served turn 1 from Redis: the model saw it, the tool found the fact.
    said = [m.content for m in model.seen[-1] if m.type in ("human", "ai", "tool")]
    assert said[:4] == [TURNS[0], "", "saved", "Noted: teal."]
    assert said[-1] == "Ana's favourite colour is teal"


async def test_the_history_without_an_agent_takes_the_thread_id(memory_rt: MemoryRuntime) -> None:
    history = MessageHistory(memory_rt)
    assert history.memory(THREAD).agent == "ana"
    with pytest.raises(MemoryInputError, match="MessageHistory has no agent"):
        await history.save([HumanMessage("hi", id="h1")], {"configurable": {}})
    # Saving again stores nothing twice; the conversions keep a tool pair and ids.
    pair = [call("recall", "c9", query="x"), ToolMessage("found", tool_call_id="c9")]
    pair[0].id, pair[1].id = "a9", "t9"
    assert await history.save(pair, THREAD) == 2
    assert await history.save(pair, THREAD) == 0
    dicts = to_memory_messages(pair)
    assert [d["id"] for d in dicts] == ["a9", "t9"]
    back = to_langchain_messages(await memory_rt.memory("ana").context())
    assert back[0].tool_calls == pair[0].tool_calls  # type: ignore[attr-defined]
    assert isinstance(back[1], ToolMessage) and back[1].tool_call_id == "c9"
