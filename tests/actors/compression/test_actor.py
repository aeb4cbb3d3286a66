"""The compressor actor in a runtime: answers, routing, errors, and a pool that stays responsive."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import anyio.to_thread
import msgspec
import pytest
from structlog.testing import capture_logs

from actormem.actors.compression import (
    COMPRESSOR_KIND,
    LOCAL_COMPRESSORS,
    CompressionConfig,
    CompressionOutcome,
    CompressRequest,
    LLMConfig,
    compressor_address,
    compressor_factory,
)
from actormem.actors.errors import MemoryInputError
from actormem.actors.messages import Message, count_tokens
from actormem.runtime import Runtime, get_counter
from actormem.runtime.redis import shard_of
from tests.actors.compression._build import assert_valid, assistant, chatter, counted, system, user
from tests.support.openai_server import OpenAIStub, serve_keyed

pytestmark = pytest.mark.anyio

KEY_ENV = "ACTORMEM_TEST_LLM_KEY"


def conversation(rounds: int = 6) -> list[Message]:
    view: list[Message] = [system()]
    for r in range(rounds):
        view += [user(f"round {r}: " + chatter(8)), assistant("ok " + chatter(8))]
    return counted([*view, user("go on")])


def agents_on_different_compressors(concurrency: int = 2) -> tuple[str, str]:
    names = [f"agent-{i}" for i in range(50)]
    first = names[0]
    other = next(
        n
        for n in names
        if compressor_address(n, concurrency) != compressor_address(first, concurrency)
    )
    return first, other


def test_routing_is_stable_and_within_the_pool() -> None:
    assert compressor_address("alice", 3) == compressor_address("alice", 3)
    used = {compressor_address(f"agent-{i}", 3) for i in range(100)}
    assert used == {"compressor/0", "compressor/1", "compressor/2"}
    with pytest.raises(ValueError, match="concurrency"):
        compressor_address("alice", -1)


def test_an_automatic_pool_in_process_spreads_agents_over_its_compressors() -> None:
    used = {compressor_address(f"agent-{i}", 0) for i in range(500)}
    assert used == {f"compressor/{i}" for i in range(LOCAL_COMPRESSORS)}


@pytest.mark.parametrize("shards", [1, 16, 64])
def test_an_automatic_pool_over_redis_has_one_compressor_per_shard_beside_its_memories(
    shards: int,
) -> None:
    homes = [f"memory/agent-{i}" for i in range(2000)]
    served = {}
    for home in homes:
        address = compressor_address(home.split("/", 1)[1], 0, shards, home)
        # The compressor runs on the memory's shard: in the worker that owns the memory.
        assert shard_of(address, shards) == shard_of(home, shards)
        served.setdefault(shard_of(home, shards), set()).add(address)
    assert len(served) == shards and all(len(a) == 1 for a in served.values())
    with pytest.raises(ValueError, match="memory's address"):
        compressor_address("alice", 0, shards)


def test_requests_and_outcomes_survive_msgpack() -> None:
    request = CompressRequest(agent="a", messages=conversation(1), version=3)
    encoded = msgspec.msgpack.encode(request)
    assert msgspec.msgpack.decode(encoded, type=CompressRequest) == request
    assert CompressRequest.reply_type is CompressionOutcome


async def test_the_actor_answers_with_the_outcome_and_logs_it() -> None:
    config = CompressionConfig(msg_threshold=6)
    view = conversation()
    async with Runtime() as rt:
        rt.register(COMPRESSOR_KIND, compressor_factory(config))
        with capture_logs() as logs:
            out = await rt.ref(compressor_address("alice", config.concurrency)).ask(
                CompressRequest(agent="alice", messages=view, version=7)
            )
    assert isinstance(out, CompressionOutcome)
    assert out.version == 7 and out.under_budget and out.messages_after <= 6
    assert_valid(out.messages)
    applied = [e for e in logs if e["event"] == "compression_applied"]
    assert len(applied) == 1
    event = applied[0]
    assert event["agent"] == "alice" and event["strategies"] == ["summarize_rounds"]
    assert event["tokens_before"] > event["tokens_after"] and event["summarizer"] == "offline"
    assert {"latency_s", "saved_tokens", "fell_back"} <= set(event)


async def test_a_wrong_message_is_refused_to_the_asker() -> None:
    async with Runtime() as rt:
        rt.register(COMPRESSOR_KIND, compressor_factory(CompressionConfig()))
        with pytest.raises(MemoryInputError, match="takes CompressRequest, got str"):
            await rt.ref("compressor/0").ask("compress please")


async def test_disabled_compression_returns_the_view_unchanged() -> None:
    view = conversation()
    async with Runtime() as rt:
        rt.register(
            COMPRESSOR_KIND, compressor_factory(CompressionConfig(enabled=False, msg_threshold=3))
        )
        out = await rt.ref("compressor/0").ask(CompressRequest(agent="a", messages=view, version=1))
    assert out.messages == view and out.strategies == [] and not out.under_budget
    assert out.note == "compression is disabled"


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAIStub]:
    yield from serve_keyed(monkeypatch, KEY_ENV)


async def test_one_compressor_answers_while_another_waits_on_the_llm(stub: OpenAIStub) -> None:
    llm = LLMConfig(base_url=stub.base_url, api_key_env=KEY_ENV, timeout=30, backoff_base=0.01)
    config = CompressionConfig(msg_threshold=6, summarizer="openai", llm=llm)
    slow_agent, fast_agent = agents_on_different_compressors(config.concurrency)
    stub.script("hang")  # the first summary request hangs; the rest are answered
    results: dict[str, Any] = {}
    slow_done = anyio.Event()

    async with Runtime() as rt:
        rt.register(COMPRESSOR_KIND, compressor_factory(config))

        async def ask(agent: str) -> None:
            address = compressor_address(agent, config.concurrency)
            request = CompressRequest(agent=agent, messages=conversation(), version=1)
            results[agent] = await rt.ref(address).ask(request, timeout=60)

        async with anyio.create_task_group() as tg:

            async def slow() -> None:
                await ask(slow_agent)
                slow_done.set()

            tg.start_soon(slow)
            assert await anyio.to_thread.run_sync(stub.hanging.wait, 30)
            await ask(fast_agent)  # served by the other compressor meanwhile
            assert not slow_done.is_set()
            stub.release()
    fast, slow_out = results[fast_agent], results[slow_agent]
    assert fast.under_budget and not fast.fell_back and fast.summarizer == "openai"
    # The held request ended without an answer and was retried: nothing was lost.
    assert slow_out.under_budget
    assert_valid(slow_out.messages)


async def test_outcomes_survive_msgpack() -> None:
    config = CompressionConfig(msg_threshold=6)
    async with Runtime() as rt:
        rt.register(COMPRESSOR_KIND, compressor_factory(config))
        out = await rt.ref("compressor/0").ask(
            CompressRequest(agent="a", messages=conversation(), version=2)
        )
    assert out.offloaded
    decoded = msgspec.msgpack.decode(msgspec.msgpack.encode(out), type=CompressionOutcome)
    assert decoded == out


async def test_a_view_that_cannot_fit_is_answered_with_why_and_logged_quietly() -> None:
    pins = [Message(role="user", content=f"rule {i}", metadata={"pinned": True}) for i in range(8)]
    view = counted([system(), *pins, user("go")])
    async with Runtime() as rt:
        rt.register(COMPRESSOR_KIND, compressor_factory(CompressionConfig(msg_threshold=4)))
        with capture_logs() as logs:
            out = await rt.ref("compressor/0").ask(
                CompressRequest(agent="a", messages=view, version=1)
            )
    assert not out.under_budget and out.messages == view
    assert "protected" in out.note
    # The memory that asked says it once (compression_stuck); the compressor is quiet.
    assert [e["log_level"] for e in logs if e["event"] == "compression_noop"] == ["debug"]
    assert not [e for e in logs if e["log_level"] in ("warning", "error")]


async def test_the_pool_shares_one_circuit_breaker(stub: OpenAIStub) -> None:
    stub.mode = "garbage"
    llm = LLMConfig(base_url=stub.base_url, api_key_env=KEY_ENV, breaker_failures=1)
    config = CompressionConfig(msg_threshold=6, summarizer="openai", llm=llm)
    first, second = agents_on_different_compressors(config.concurrency)
    async with Runtime() as rt:
        rt.register(COMPRESSOR_KIND, compressor_factory(config))
        for agent in (first, second):
            out = await rt.ref(compressor_address(agent, config.concurrency)).ask(
                CompressRequest(agent=agent, messages=conversation(), version=1)
            )
            assert out.under_budget and out.fell_back
            if agent == first:
                sent = stub.requests
    # The second compressor did not try the endpoint the first found broken.
    assert sent >= 1 and stub.requests == sent


async def test_the_compressor_counts_with_the_memories_encoding() -> None:
    config = CompressionConfig(msg_threshold=6)
    # Sent uncounted (tokens -1), so the compressor counts them; in text the two
    # encodings count differently (o200k_base holds far more Cyrillic).
    chat = [user(f"раунд {r}: привет мир, как дела сегодня " * 6) for r in range(8)]
    view = [*counted([system()]), *chat, user("привет мир, как дела сегодня?")]
    o200k, cl100k = get_counter("o200k_base"), get_counter("cl100k_base")
    async with Runtime() as rt:
        rt.register(COMPRESSOR_KIND, compressor_factory(config, "o200k_base"))
        out = await rt.ref(compressor_address("alice", config.concurrency)).ask(
            CompressRequest(agent="alice", messages=view, version=1)
        )
    kept = [m for m in out.messages if "привет" in str(m.content)]
    assert kept, "the compression kept no message of the chat"
    for m in kept:
        assert m.tokens == count_tokens(m, o200k) != count_tokens(m, cl100k)
