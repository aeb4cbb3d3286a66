"""Compression rounds over Redis: a round in flight outlives the runtime that started
it, a result is applied once, and a result computed from a rewritten view is refused
and redone.

The summarizer is the loopback OpenAI stub: in ``hang`` mode it holds a compression
in flight for as long as a test needs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import msgspec
import pytest
import redis.asyncio as aioredis
from structlog.testing import capture_logs

from actormem.actors import AppConfig, MemoryRuntime, Message
from actormem.actors.compression import (
    COMPRESSOR_KIND,
    CircuitBreaker,
    CompressionConfig,
    CompressionOutcome,
    CompressorActor,
    CompressRequest,
    LLMConfig,
    compressor_address,
)
from actormem.actors.compression._layout import sendable
from actormem.actors.conversation import check_openai_messages
from actormem.actors.memory.actor import memory_factory
from actormem.actors.memory.commands import CompressionDone
from actormem.actors.memory.compaction import RETRIES
from actormem.actors.memory.handle import MemoryHandle
from actormem.actors.memory.snapshot import MemorySnapshot
from actormem.runtime import Runtime, RuntimeConfig
from actormem.runtime.redis import Keys, RedisConfig, shard_of
from tests.actors.compression._build import town_small
from tests.support.openai_server import OpenAIStub, serve_keyed

pytestmark = pytest.mark.anyio

KEY_ENV = "ACTORMEM_TEST_ROUNDS_KEY"


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAIStub]:
    yield from serve_keyed(monkeypatch, KEY_ENV)


def app(stub: OpenAIStub, redis: RedisConfig) -> AppConfig:
    llm = LLMConfig(
        base_url=stub.base_url, api_key_env=KEY_ENV, model="stub", timeout=30.0, max_retries=0
    )
    compression = CompressionConfig(
        msg_threshold=20, max_tokens=1200, last_keep=6, summarizer="openai", llm=llm, timeout=40.0
    )
    # A short drain: closing gives up on the compression held by the stub.
    runtime = RuntimeConfig(transport="redis", drain_timeout=0.3)
    return AppConfig(redis=redis, runtime=runtime, compression=compression)


def turn(i: int) -> list[Message]:
    return [
        Message(role="user", name="bob", content=f"question {i}: how is the mill today?"),
        Message(role="assistant", content=f"answer {i}: the wheel turned {i} times."),
    ]


async def fill(mem: MemoryHandle) -> int:
    """Add turns until a compression is in flight; return the messages added."""
    added = 0
    await mem.add({"role": "system", "content": "You are Ana, the miller."})
    added += 1
    for i in range(40):
        await mem.add(turn(i))
        added += 2
        if (await mem.stats()).compressing:
            return added
    raise AssertionError("no compression started")


async def wait_idle(mem: MemoryHandle, limit: float = 30.0) -> None:
    with anyio.fail_after(limit):
        while (await mem.stats()).compressing:  # noqa: ASYNC110 (polling the actor)
            await anyio.sleep(0.02)


async def snapshot(client: aioredis.Redis, redis: RedisConfig, agent: str) -> MemorySnapshot:
    address = f"memory/{agent}"
    key = Keys(redis.prefix).actor_snapshot(shard_of(address, redis.shards), address)
    data = await client.get(key)
    assert data is not None
    return msgspec.msgpack.decode(data, type=MemorySnapshot)


def assert_sound(view: list[Message], history: list[Message], config: CompressionConfig) -> None:
    """Valid for an LLM, within budget, and holding each original message once."""
    assert check_openai_messages([m.to_openai() for m in sendable(view)]) == []
    assert not config.over_budget(len(view), sum(m.tokens for m in view))
    originals = {m.id for m in history}
    kept = [m.id for m in view if m.id in originals]
    covered = [i for m in view for i in m.metadata.get("summarized_ids", ())]
    assert len(kept) + len(covered) == len(set(kept) | set(covered)), "a message twice"


async def test_a_round_in_flight_when_its_runtime_stops_is_asked_again_and_applied_once(
    stub: OpenAIStub, redis_config: RedisConfig, redis_client: aioredis.Redis
) -> None:
    config = app(stub, redis_config)
    stub.mode = "hang"
    async with MemoryRuntime(config) as first:
        mem = first.memory("ana")
        added = await fill(mem)
        with anyio.fail_after(10):
            await anyio.to_thread.run_sync(stub.hanging.wait)
        held = await snapshot(redis_client, redis_config, "ana")
    # The runtime gave up on the compression: its round is what it stored.
    assert held.compaction is not None and held.compaction.pending
    assert held.compaction.rounds == 1 and held.compressions == 0

    stub.mode = "normal"
    stub.release()
    with capture_logs() as logs:
        async with MemoryRuntime(config) as second:
            mem = second.memory("ana")
            assert (await mem.stats()).compressing  # restored with the round in flight
            await wait_idle(mem)
            stats = await mem.stats()
            view = await mem.get()
            history = await mem.get(scope="history")
    assert [e["event"] for e in logs].count("compression_resumed") == 1
    assert stats.compressions == 1 and stats.history_size == added
    assert any("LLM SUMMARY" in m.text() for m in view)
    assert_sound(view, history, config.compression)
    ended = await snapshot(redis_client, redis_config, "ana")
    assert ended.compaction is not None and not ended.compaction.pending
    assert ended.compaction.ended == [held.compaction.pending]


async def test_a_repeated_result_of_an_ended_round_changes_nothing(
    stub: OpenAIStub, redis_config: RedisConfig, redis_client: aioredis.Redis
) -> None:
    config = app(stub, redis_config)
    async with MemoryRuntime(config) as rt:
        mem = rt.memory("ana")
        await fill(mem)
        await wait_idle(mem)
        before = await mem.get()
        stats = await mem.stats()
        state = await snapshot(redis_client, redis_config, "ana")
        assert state.compaction is not None
        (token,) = state.compaction.ended
        # The same round's work done again (by a dead worker's compressor, say),
        # from the view it started from: every message added, as nothing came after.
        started = await mem.get(scope="history")
        request = CompressRequest(agent="ana", messages=started, version=state.version - 1)
        repeat = await rt.ask(compressor_address("ana", 2), request)
        assert repeat.strategies
        with capture_logs() as logs:
            done = CompressionDone(version=state.version - 1, outcome=repeat, token=token)
            assert await rt.ask("memory/ana", done) is None
        assert [e["event"] for e in logs] == ["compression_result_repeated"]
        assert await mem.get() == before
        assert (await mem.stats()).compressions == stats.compressions


async def test_a_result_for_a_view_rewritten_meanwhile_is_refused_and_redone(
    stub: OpenAIStub, redis_config: RedisConfig
) -> None:
    config = app(stub, redis_config)
    stub.mode = "hang"
    with capture_logs() as logs:
        async with MemoryRuntime(config) as rt:
            mem = rt.memory("ana")
            await fill(mem)
            with anyio.fail_after(10):
                await anyio.to_thread.run_sync(stub.hanging.wait)
            gone = (await mem.get())[1]
            await mem.delete(gone.id)  # the view is rewritten under the compression
            await mem.add(turn(99))  # and is over budget still
            stub.mode = "normal"
            stub.release()
            await wait_idle(mem)
            stats = await mem.stats()
            view = await mem.get()
            history = await mem.get(scope="history")
    events = [e["event"] for e in logs]
    assert events.count("compression_discarded") == 1
    assert stats.compressions == 1
    assert gone.id not in {m.id for m in view}
    assert all(gone.id not in m.metadata.get("summarized_ids", ()) for m in view)
    assert_sound(view, history, config.compression)


class Scripted(CompressorActor):
    """A compressor whose first answers are scripted: ``"fail"`` raises, ``"other"``
    answers as if to another request; then it compresses."""

    script: list[str] = []

    async def receive(self, message: Any) -> CompressionOutcome:
        step = Scripted.script.pop(0) if Scripted.script else "compress"
        if step == "fail":
            raise RuntimeError("the compressor's worker died")
        outcome = await super().receive(message)
        if step == "other":
            return msgspec.structs.replace(outcome, agent="someone-else", request="r0")
        return outcome


def scripted_runtime(script: list[str]) -> Runtime:
    """A runtime with agent memories and the :class:`Scripted` compressors."""
    Scripted.script = list(script)
    config = AppConfig(compression=town_small())
    rt = Runtime()
    rt.register("memory", memory_factory(config))
    breaker = CircuitBreaker(1000, 1.0)
    rt.register(COMPRESSOR_KIND, lambda ctx: Scripted(ctx, config.compression, breaker))
    return rt


async def fill_plain(mem: MemoryHandle) -> None:
    await mem.add({"role": "system", "content": "You are Ana, the miller."})
    for i in range(60):
        await mem.add(turn(i))
        if (await mem.stats()).compressing:
            return
    raise AssertionError("no compression started")


async def test_an_answer_to_another_request_or_a_failed_ask_is_asked_again() -> None:
    with capture_logs() as logs:
        async with scripted_runtime(["other", "fail"]) as rt:
            mem = MemoryHandle(rt, "ana")
            await fill_plain(mem)
            await wait_idle(mem)
            stats = await mem.stats()
            view = await mem.get()
    retried = [e["reason"] for e in logs if e["event"] == "compression_retried"]
    assert len(retried) == 2 and "another request" in retried[0]
    assert "RuntimeError" in retried[1]
    assert "compression_failed" not in [e["event"] for e in logs]
    assert stats.compressions == 1
    assert all(m.metadata.get("compressed") != "someone-else" for m in view)


async def test_a_round_whose_asks_keep_failing_ends_and_backs_off() -> None:
    with capture_logs() as logs:
        async with scripted_runtime(["fail"] * (RETRIES + 1)) as rt:
            mem = MemoryHandle(rt, "ana")
            await fill_plain(mem)
            await wait_idle(mem)
            stats = await mem.stats()
            await mem.add(turn(100))  # within the back-off: no new round
            assert not (await mem.stats()).compressing
    events = [e["event"] for e in logs]
    assert events.count("compression_retried") == RETRIES
    assert events.count("compression_failed") == 1
    assert stats.compressions == 0


async def test_an_automatic_pool_compresses_on_the_shard_of_each_memory(
    redis_config: RedisConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # concurrency = 0 over Redis: one compressor per shard, on the memory's shard,
    # so a compression runs in the worker that owns the memory.
    served: list[str] = []
    receive = CompressorActor.receive

    async def noted(self: CompressorActor, message: Any) -> CompressionOutcome:
        served.append(self.ctx.address)
        return await receive(self, message)

    monkeypatch.setattr(CompressorActor, "receive", noted)
    compression = CompressionConfig(msg_threshold=20, max_tokens=1200, last_keep=6, concurrency=0)
    config = AppConfig(
        redis=redis_config, runtime=RuntimeConfig(transport="redis"), compression=compression
    )
    shards = redis_config.shards
    async with MemoryRuntime(config) as rt:
        for agent in ("ana", "bo"):
            mem = rt.memory(agent)
            await fill(mem)
            await wait_idle(mem)
            assert (await mem.stats()).compressions >= 1
    homes = {shard_of(f"memory/{a}", shards) for a in ("ana", "bo")}
    assert served and {shard_of(a, shards) for a in served} == homes
