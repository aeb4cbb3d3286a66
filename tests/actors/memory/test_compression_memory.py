"""Compression inside the memory actor: thresholds, concurrency, reload, budgets."""

from __future__ import annotations

import json

import anyio
import pytest

from actormem.actors import AppConfig, MemoryRuntime, Message, ToolCall, check_openai_messages
from actormem.actors.compression import CompressionConfig

pytestmark = pytest.mark.anyio


def small(**overrides: object) -> AppConfig:
    values: dict[str, object] = {"msg_threshold": 20, "max_tokens": 1200, "last_keep": 6}
    values.update(overrides)
    return AppConfig(compression=CompressionConfig(**values))  # type: ignore[arg-type]


def turn(i: int) -> list[dict[str, str]]:
    return [
        {"role": "user", "name": "bob", "content": f"Question {i}: how is the mill at dawn?"},
        {"role": "assistant", "content": f"Answer {i}: the mill wheel turned {i} times."},
    ]


async def wait_idle(mem: object) -> None:
    with anyio.fail_after(10):
        while (await mem.stats()).compressing:  # type: ignore[attr-defined]  # noqa: ASYNC110
            await anyio.sleep(0.005)


async def test_crossing_the_threshold_compresses_and_keeps_everything_reachable() -> None:
    async with MemoryRuntime(small()) as rt:
        mem = rt.memory("ana")
        await mem.add({"role": "system", "content": "You are Ana."})
        await mem.add(
            Message(role="user", content="The vault code is 4821-K.", metadata={"important": True})
        )
        for i in range(30):
            await mem.add(turn(i))
            await wait_idle(mem)
        stats = await mem.stats()
        assert stats.compressions >= 1 and stats.tokens_saved > 0
        assert stats.size <= 20 + 2  # back under the message threshold (plus one turn)
        assert stats.history_size == 62  # the original history is untouched
        view = await mem.get()
        assert view[0].content == "You are Ana."  # system messages are never compressed
        assert view[-1].content == turn(29)[1]["content"]
        assert check_openai_messages([m.to_openai() for m in view]) == []
        # Everything compressed is reachable: offloaded originals by reload.
        offloaded = await mem.get(scope="offloaded")
        assert any("4821-K" in m.text() for m in offloaded + view)
        reload_ids = {m.metadata["reload_id"] for m in view if "reload_id" in m.metadata}
        assert reload_ids
        for reload_id in reload_ids:
            assert await mem.reload(reload_id)


async def test_messages_added_during_compression_are_kept() -> None:
    async with MemoryRuntime(small()) as rt:
        mem = rt.memory("ana")
        for i in range(10):
            await mem.add(turn(i))  # 20 messages: at the threshold
        await mem.add(turn(10))  # crosses it: compression starts in the background
        assert (await mem.stats()).compressing
        late = [turn(100 + i) for i in range(3)]
        for batch in late:  # the actor keeps serving meanwhile
            await mem.add(batch)
        await wait_idle(mem)
        view = [m.text() for m in await mem.get()]
        for batch in late:
            for message in batch:
                assert message["content"] in view
        assert (await mem.stats()).compressions >= 1


async def test_a_result_for_a_rewritten_view_is_discarded() -> None:
    async with MemoryRuntime(small()) as rt:
        mem = rt.memory("ana")
        for i in range(11):
            await mem.add(turn(i))
        assert (await mem.stats()).compressing
        await mem.delete(0)  # rewrites the view while the compressor works
        await wait_idle(mem)
        view = await mem.get()
        assert "Question 0" not in " ".join(m.text() for m in view)  # the delete holds


async def test_context_reload_tool_answers_from_the_offload_store() -> None:
    config = small(large_payload_threshold=300)
    async with MemoryRuntime(config) as rt:
        mem = rt.memory("ana")
        big = "The ledger lists: " + "; ".join(f"item {i} costs {i * 3} coins" for i in range(60))
        await mem.add(
            [
                {"role": "user", "content": "Read the ledger."},
                Message(role="assistant", tool_calls=(ToolCall("c1", "read_ledger", "{}"),)),
                Message(role="tool", tool_call_id="c1", name="read_ledger", content=big),
                {"role": "assistant", "content": "Done reading."},
            ]
        )
        for i in range(20):
            await mem.add(turn(i))
            await wait_idle(mem)
        tools = [t["function"]["name"] for t in await mem.memory_tools()]
        assert "context_reload" in tools
        view = await mem.get()
        hinted = [m for m in view if "reload_id" in m.metadata]
        assert hinted
        reload_id = hinted[0].metadata["reload_id"]
        call = ToolCall("r1", "context_reload", json.dumps({"id": reload_id}))
        answer = await mem.answer_tool_call(call)
        assert answer is not None and answer.tool_call_id == "r1"
        assert reload_id in str(answer.content)
        bad = await mem.answer_tool_call(ToolCall("r2", "context_reload", '{"id": "nope"}'))
        assert bad is not None and "nope" in str(bad.content)


async def test_compression_can_be_turned_off() -> None:
    async with MemoryRuntime(small(enabled=False)) as rt:
        mem = rt.memory("ana")
        for i in range(30):
            await mem.add(turn(i))
        stats = await mem.stats()
        assert (stats.compressions, stats.size) == (0, 60)


async def test_a_compression_result_nobody_asked_for_changes_nothing() -> None:
    from actormem.actors.compression import CompressionOutcome
    from actormem.actors.errors import MemoryInputError
    from actormem.actors.memory.commands import CompressionDone

    async with MemoryRuntime(small()) as rt:
        mem = rt.memory("ana")
        await mem.add(turn(0))
        forged = CompressionOutcome(
            version=0, messages=[Message(role="user", content="forged")], offloaded={},
            strategies=[], passes=0, tokens_before=0, tokens_after=0, messages_before=2,
            messages_after=1, under_budget=True, summarizer="offline", fell_back=False,
            latency_s=0.0, note="",
        )  # fmt: skip
        with pytest.raises(MemoryInputError, match="no compression with that token"):
            await rt.ask("memory/ana", CompressionDone(version=0, outcome=forged, token="x"))
        assert [m.text() for m in await mem.get()] == [t["content"] for t in turn(0)]


async def test_a_round_queued_behind_a_busy_compressor_waits_and_is_never_failed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The compressor is busy (held) for longer than the compression's own timeout
    # plus any slack an ask of that size would give; the round still ends with its
    # result, asked once: the time limit bounds the compression, not its queue.
    from structlog.testing import capture_logs

    from actormem.actors.compression import actor as compressor

    held = anyio.Event()
    real = compressor.compress

    async def busy(*args: object, **kwargs: object) -> object:
        await held.wait()
        return await real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(compressor, "compress", busy)
    config = small(timeout=0.01)
    with capture_logs() as logs:
        async with MemoryRuntime(config) as rt:
            mem = rt.memory("ana")
            for i in range(11):
                await mem.add(turn(i))  # crosses the threshold: the round is asked
            assert (await mem.stats()).compressing
            await anyio.sleep(config.compression.timeout + 5.5)
            held.set()
            await wait_idle(mem)
            assert (await mem.stats()).compressions == 1
    events = {e["event"] for e in logs}
    assert not events & {"compression_failed", "compression_retried"}
