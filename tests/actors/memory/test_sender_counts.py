"""Token counts made where a message is made: the handle counts, the memory takes
the counts of its own encoding, and checks them with ``verify_token_counts``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from actormem.actors import AppConfig, MemoryInputError, MemoryRuntime, Message
from actormem.actors.app.wiring import worker_env
from actormem.actors.config import MemoryConfig
from actormem.actors.memory import store as store_module
from actormem.actors.memory.commands import Add
from actormem.runtime import Transport, get_counter
from actormem.runtime.redis import RedisConfig, RedisTransport
from actormem.runtime.redis.worker import WorkerProcesses
from tests.actors.memory.spies import spy_on_counting
from tests.actors.memory.test_memory import chat

pytestmark = pytest.mark.anyio


def exact(message: Message) -> int:
    """The count straight from tiktoken's encoder, by the chat format's rule."""
    encode = get_counter().encode
    rendered = message.to_openai()
    total = 3 + len(encode(rendered["role"]))
    content = rendered.get("content")
    if isinstance(content, list):
        total += sum(len(encode(part["text"])) for part in content)
    elif content:
        total += len(encode(content))
    if rendered.get("name"):
        total += 1 + len(encode(rendered["name"]))
    if rendered.get("tool_call_id"):
        total += len(encode(rendered["tool_call_id"]))
    for call in rendered.get("tool_calls") or ():
        fn = call["function"]
        total += 3 + len(encode(fn["name"])) + len(encode(fn["arguments"]))
    return total


@pytest.fixture
def memory_counts(monkeypatch: pytest.MonkeyPatch) -> list[Message]:
    """Every message the memory's store counts itself."""
    return spy_on_counting(monkeypatch, store_module)


@pytest.fixture
async def verifying_rt(make_transport: Callable[[], Transport]) -> AsyncIterator[MemoryRuntime]:
    config = AppConfig(memory=MemoryConfig(verify_token_counts=True))
    async with MemoryRuntime(config, transport=make_transport()) as rt:
        yield rt


async def test_the_handle_counts_and_the_memory_takes_its_counts(
    memory_rt: MemoryRuntime, memory_counts: list[Message], monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[Any] = []
    ask = memory_rt.ask

    async def recording_ask(address: str, command: Any, timeout: float | None = None) -> Any:
        sent.append(command)
        return await ask(address, command, timeout)

    monkeypatch.setattr(memory_rt, "ask", recording_ask)
    alice = memory_rt.memory("alice")
    messages = chat()
    expected = [exact(m) for m in messages]
    result = await alice.add(messages)
    await alice.add({"role": "user", "content": "one more"})
    (command, one) = sent[:2]
    assert isinstance(command, Add) and command.encoding == "cl100k_base"
    assert [m.tokens for m in command.messages] == expected
    assert one.messages[0].tokens == exact(Message(role="user", content="one more"))
    assert memory_counts == []  # the memory counted nothing itself
    assert result.tokens == expected
    stored = await alice.get()
    assert [m.tokens for m in stored] == [*expected, one.messages[0].tokens]


async def test_a_forged_count_is_refused_when_verifying(verifying_rt: MemoryRuntime) -> None:
    alice = verifying_rt.memory("alice")
    await alice.add(chat())  # the handle's own counts pass verification
    size = await alice.size()
    right = Message(role="user", content="the vault code is 4821")
    forged = Message(role="user", content="hello there", tokens=1)
    for batch in ([forged], [right.with_tokens(exact(right)), forged]):
        with pytest.raises(MemoryInputError, match=r"carries a count of 1 tokens, but it has \d+"):
            await verifying_rt.ask(alice.address, Add(messages=batch, encoding="cl100k_base"))
    assert await alice.size() == size  # nothing stored
    fixed = await alice.add(forged)  # the memory goes on; the handle counts anew
    assert fixed.tokens == [exact(forged)]


async def test_counts_are_taken_as_sent_without_verification(memory_rt: MemoryRuntime) -> None:
    sent = Message(role="user", content="hello there", tokens=1000)
    result = await memory_rt.ask("memory/alice", Add(messages=[sent], encoding="cl100k_base"))
    assert result.tokens == [1000]


@pytest.mark.parametrize("encoding", [None, "o200k_base"])
async def test_a_command_without_counts_of_its_encoding_is_counted_by_the_memory(
    memory_rt: MemoryRuntime, memory_counts: list[Message], encoding: str | None
) -> None:
    messages = [m.with_tokens(1) for m in chat()]
    result = await memory_rt.ask("memory/alice", Add(messages=messages, encoding=encoding))
    assert result.tokens == [exact(m) for m in messages]
    assert len(memory_counts) == len(messages)


async def test_an_encoding_that_is_not_text_is_refused(memory_rt: MemoryRuntime) -> None:
    with pytest.raises(MemoryInputError, match=r"(?i)add: encoding must be"):
        await memory_rt.ask(
            "memory/alice",
            Add(messages=[Message(role="user", content="hi")], encoding=7),  # type: ignore[arg-type]
        )


@pytest.mark.slow
async def test_counts_travel_from_a_client_to_a_worker_process(redis_config: RedisConfig) -> None:
    config = AppConfig(memory=MemoryConfig(verify_token_counts=True), redis=redis_config)
    client = RedisTransport(redis_config.url, redis_config, worker=False)
    register = "actormem.actors.app.wiring:worker_register"
    async with (
        WorkerProcesses(1, redis_config, register, env=worker_env(config)),
        MemoryRuntime(config, transport=client) as rt,
    ):
        alice = rt.memory("alice")
        messages = chat()
        result = await alice.add(messages)  # counted here, verified by the worker
        assert result.tokens == [exact(m) for m in messages]
        forged = Message(role="user", content="hello there", tokens=1)
        with pytest.raises(MemoryInputError, match="carries a count of 1 tokens"):
            await rt.ask(alice.address, Add(messages=[forged], encoding="cl100k_base"))
        assert await alice.size() == len(messages)
