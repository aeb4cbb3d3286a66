"""Edits: update, mark and unmark change a working-view message in place."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from actormem.actors import (
    MemoryInputError,
    MemoryRuntime,
    Message,
    ToolCall,
    check_openai_messages,
)
from actormem.actors.config import AppConfig
from actormem.actors.messages import count_tokens
from actormem.runtime import LocalTransport, get_counter

pytestmark = pytest.mark.anyio


async def test_update_changes_the_message_recounts_and_records_the_edit(
    memory_rt: MemoryRuntime,
) -> None:
    alice = memory_rt.memory("alice")
    first = Message(id="m1", role="user", content="short", metadata={"topic": "bread"})
    added = await alice.add([first, Message(id="m2", role="assistant", content="ok")])
    updated = await alice.update("m1", content="a much longer text " * 10, importance=0.7)
    assert updated.id == "m1"
    assert updated.content == "a much longer text " * 10
    assert updated.importance == 0.7
    assert updated.metadata == {"topic": "bread"}
    counter = get_counter(memory_rt.app_config.memory.encoding)
    assert updated.tokens == count_tokens(msgspec.structs.replace(updated, tokens=-1), counter)
    assert updated.tokens > added.tokens[0]
    working = await alice.get()
    assert [m.id for m in working] == ["m1", "m2"]
    assert working[0] == updated
    after = await alice.stats()
    assert after.working_tokens == updated.tokens + added.tokens[1]
    # The history keeps the original and gains the edit record.
    history = await alice.get(scope="history")
    assert [m.id for m in history] == ["m1", "m2", "m1.edit1"]
    assert history[0].content == "short"
    record = history[2]
    assert record.content == updated.content
    assert record.metadata["edit_of"] == "m1"
    assert isinstance(record.metadata["edited_at"], float)
    again = await alice.update("m1", metadata={"topic": "cake"})
    assert again.metadata == {"topic": "cake"} and again.importance == 0.7
    history = await alice.get(scope="history")
    assert [m.id for m in history][-1] == "m1.edit2"
    edits = await alice.get(scope="history", metadata={"edit_of": "m1"})
    assert [m.id for m in edits] == ["m1.edit1", "m1.edit2"]


async def test_update_refuses_unknown_ids_and_bad_messages_and_changes_nothing(
    memory_rt: MemoryRuntime,
) -> None:
    alice = memory_rt.memory("alice")
    await alice.add([Message(id="m1", role="user", content="hello")])
    before = await alice.export()
    with pytest.raises(MemoryInputError, match="no message with id 'nope'"):
        await alice.update("nope", content="x")
    limit = memory_rt.app_config.memory.max_message_chars
    with pytest.raises(MemoryInputError, match="limit"):
        await alice.update("m1", content="x" * (limit + 1))
    with pytest.raises(MemoryInputError, match="importance"):
        await alice.update("m1", importance=2.0)
    with pytest.raises(MemoryInputError, match="content"):
        await alice.update("m1", content=42)  # type: ignore[arg-type]
    after = await alice.export()
    assert after.working == before.working and after.history == before.history


async def test_mark_and_unmark_set_and_remove_metadata_in_place(memory_rt: MemoryRuntime) -> None:
    alice = memory_rt.memory("alice")
    await alice.add([Message(id="m1", role="user", content="hi", metadata={"a": 1})])
    marked = await alice.mark("m1", important=True, topic="bread")
    assert marked.metadata == {"a": 1, "important": True, "topic": "bread"}
    assert [m.id for m in await alice.get(important=True)] == ["m1"]
    unmarked = await alice.unmark("m1", "important", "absent")
    assert unmarked.metadata == {"a": 1, "topic": "bread"}
    assert await alice.get(important=True) == []
    history = await alice.get(scope="history")
    assert [m.id for m in history] == ["m1", "m1.edit1", "m1.edit2"]
    assert history[0].metadata == {"a": 1}
    with pytest.raises(MemoryInputError, match="remove_metadata"):
        await alice.unmark("m1", 3)  # type: ignore[arg-type]


async def test_set_summary_replaces_messages_and_keeps_them_reloadable(
    memory_rt: MemoryRuntime,
) -> None:
    alice = memory_rt.memory("alice")
    await alice.add(
        [
            Message(id="s", role="system", content="You are Alice."),
            Message(id="u1", role="user", content="What is the weather?"),
            Message(id="a1", role="assistant", tool_calls=(ToolCall("c1", "weather", "{}"),)),
            Message(id="t1", role="tool", tool_call_id="c1", name="weather", content="sunny"),
            Message(id="a2", role="assistant", content="It is sunny.", importance=0.4),
            Message(id="u2", role="user", content="Thanks."),
        ]
    )
    history_before = await alice.get(scope="history")
    summary = await alice.set_summary(
        "Bob asked the weather: sunny.", replaces=["u1", "a1", "t1", "a2"]
    )
    assert summary.role == "assistant"
    assert isinstance(summary.content, str) and summary.content.startswith("Bob asked")
    assert summary.metadata["summarized_ids"] == ["u1", "a1", "t1", "a2"]
    assert summary.importance == 0.4
    working = await alice.get()
    assert [m.id for m in working] == ["s", summary.id, "u2"]
    assert (await alice.stats()).working_tokens == sum(m.tokens for m in working)
    originals = await alice.reload(summary.metadata["reload_id"])
    assert [m.id for m in originals] == ["u1", "a1", "t1", "a2"]
    assert await alice.get(scope="history") == history_before
    assert check_openai_messages(await alice.context(4000)) == []


async def test_set_summary_refuses_to_split_a_tool_pair_and_changes_nothing(
    memory_rt: MemoryRuntime,
) -> None:
    alice = memory_rt.memory("alice")
    await alice.add(
        [
            Message(id="a1", role="assistant", tool_calls=(ToolCall("c1", "weather", "{}"),)),
            Message(id="t1", role="tool", tool_call_id="c1", name="weather", content="sunny"),
            Message(id="u2", role="user", content="Thanks."),
        ]
    )
    before = await alice.export()
    with pytest.raises(MemoryInputError, match=r"would split.*\['t1'\]"):
        await alice.set_summary("the call", replaces=["a1"])
    with pytest.raises(MemoryInputError, match="no message with id 'zz'"):
        await alice.set_summary("x", replaces=["u2", "zz"])
    with pytest.raises(MemoryInputError, match="appears twice"):
        await alice.set_summary("x", replaces=["u2", "u2"])
    with pytest.raises(MemoryInputError, match="replaces must be a non-empty list"):
        await alice.set_summary("x", replaces=[])
    with pytest.raises(MemoryInputError, match="text must be a non-empty string"):
        await alice.set_summary(" ", replaces=["u2"])
    after = await alice.export()
    assert (after.working, after.history, after.offloaded) == (
        before.working,
        before.history,
        before.offloaded,
    )


async def test_edits_survive_a_restart_of_the_runtime(make_transport: Any) -> None:
    # On Redis the second runtime rebuilds the memory from the stored log and snapshot.
    async with MemoryRuntime(AppConfig(), transport=make_transport()) as rt:
        alice = rt.memory("alice")
        await alice.add([Message(id=f"m{i}", role="user", content=f"note {i}") for i in range(4)])
        await alice.update("m0", content="note zero, edited")
        await alice.mark("m1", seen=True)
        summary = await alice.set_summary("notes two and three", replaces=["m2", "m3"])
        await alice.add([Message(id="m4", role="user", content="after")])
        working = await alice.get()
        history = await alice.get(scope="history")
    if isinstance(rt.transport, LocalTransport):
        return  # nothing outlives an in-process runtime
    async with MemoryRuntime(AppConfig(), transport=make_transport()) as rt:
        alice = rt.memory("alice")
        assert await alice.get() == working
        assert await alice.get(scope="history") == history
        reloaded = await alice.reload(summary.metadata["reload_id"])
        assert [m.id for m in reloaded] == ["m2", "m3"]


async def test_an_edit_reaches_long_term_memory_and_episodes(make_transport: Any) -> None:
    async with MemoryRuntime(AppConfig(), transport=make_transport()) as rt:
        alice = rt.memory("alice")
        await alice.add(
            [
                Message(id="q", role="user", content="The ferry leaves at nine from pier four."),
                Message(id="a", role="assistant", content="Noted the ferry time."),
            ]
        )  # static control records the turn once the reply is in
        assert [r.entry.text for r in await alice.retrieve("ferry pier")][:1] == [
            "The ferry leaves at nine from pier four."
        ]
        await alice.update("q", content="The ferry leaves at ten from pier two.", importance=0.9)
        await alice.mark("a", important=True)
        recalled = await alice.retrieve("ferry pier")
        texts = [r.entry.text for r in recalled]
        assert "The ferry leaves at ten from pier two." in texts
        assert not any("nine" in t for t in texts)
        edited = next(r.entry for r in recalled if "ten" in r.entry.text)
        assert edited.importance == 0.9 and edited.source_message_ids == ("q",)
        (episode,) = await alice.recall_episode("ferry")
        assert episode.messages[0].content == "The ferry leaves at ten from pier two."
        assert (await alice.stats()).core_messages == 2  # both weigh enough for core memory now
    if isinstance(rt.transport, LocalTransport):
        return
    async with MemoryRuntime(AppConfig(), transport=make_transport()) as rt:
        texts = [r.entry.text for r in await rt.memory("alice").retrieve("ferry pier")]
        assert "The ferry leaves at ten from pier two." in texts
        assert not any("nine" in t for t in texts)
