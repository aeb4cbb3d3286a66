"""Every operation of the agent memory actor, through its typed handle."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from actormem.actors import (
    ContextBudgetError,
    MemoryExport,
    MemoryInputError,
    MemoryRuntime,
    Message,
    ToolCall,
    check_openai_messages,
)
from actormem.actors.memory.commands import Add
from actormem.runtime import get_counter
from tests.actors.memory.stored import StoredState

pytestmark = pytest.mark.anyio


def chat() -> list[Message]:
    return [
        Message(role="system", content="You are Alice, the town's baker."),
        Message(role="user", name="bob", content="What's the weather in Paris?"),
        Message(role="assistant", tool_calls=(ToolCall("c1", "weather", '{"city": "Paris"}'),)),
        Message(role="tool", tool_call_id="c1", name="weather", content="sunny, 21C"),
        Message(role="assistant", name="alice", content="Sunny and 21C in Paris."),
        Message(
            role="user",
            name="carol",
            content="The vault code is 4821.",
            metadata={"category": "fact", "important": True},
        ),
        Message(role="assistant", name="alice", content="Noted.", importance=0.9),
    ]


async def test_add_counts_tokens_once_and_keeps_budgets(memory_rt: MemoryRuntime) -> None:
    alice = memory_rt.memory("alice")
    msgs = chat()
    result = await alice.add(msgs)
    counter = get_counter()
    expected = [counter.count_message(m.to_openai()) for m in msgs]
    assert result.ids == [m.id for m in msgs]
    assert result.tokens == expected
    assert result.working_tokens == sum(expected)
    stored = await alice.get()
    assert [m.tokens for m in stored] == expected
    stats = await alice.stats()
    assert (stats.size, stats.history_size, stats.working_tokens) == (7, 7, sum(expected))
    await alice.delete(-1)
    assert (await alice.stats()).working_tokens == sum(expected[:-1])


async def test_stats_keep_the_peaks_and_the_history_total_as_the_view_shrinks(
    memory_rt: MemoryRuntime,
) -> None:
    alice = memory_rt.memory("alice")
    tokens = (await alice.add(chat())).tokens
    for text in ("one more", "and the last"):
        tokens += (await alice.add(Message(role="user", content=text))).tokens
    most = sum(tokens)
    await alice.prune(tokens[-1], preserve_system=False)  # the view shrinks to the last
    tokens += (await alice.add(Message(role="user", content="after the prune"))).tokens
    stats = await alice.stats()
    assert (stats.size, stats.working_tokens) == (2, sum(tokens[-2:]))
    assert (stats.peak_size, stats.peak_working_tokens) == (9, most)
    assert (stats.history_size, stats.history_tokens) == (10, sum(tokens))
    await alice.clear(history=True)
    tokens = (await alice.add(Message(role="user", content="a fresh start"))).tokens
    stats = await alice.stats()
    assert (stats.history_size, stats.history_tokens) == (1, tokens[0])
    assert (stats.peak_size, stats.peak_working_tokens) == (9, most)


async def test_a_told_add_stores_what_an_asked_one_does(memory_rt: MemoryRuntime) -> None:
    told, asked = Message(role="user", content="told"), Message(role="user", content="asked")
    await memory_rt.tell("memory/alice", Add(messages=[told]))
    result = await memory_rt.ask("memory/alice", Add(messages=[asked]))
    assert result.ids == [asked.id]
    assert result.size == 2
    assert [m.id for m in await memory_rt.memory("alice").get()] == [told.id, asked.id]


async def test_add_accepts_openai_dicts_and_rejects_bad_ones_whole(
    memory_rt: MemoryRuntime,
) -> None:
    alice = memory_rt.memory("alice")
    await alice.add(
        [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": "c9", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c9", "content": "ok"},
        ]
    )
    assert await alice.size() == 3
    with pytest.raises(MemoryInputError, match="needs the tool_call_id"):
        await alice.add([{"role": "user", "content": "fine"}, {"role": "tool", "content": "x"}])
    with pytest.raises(MemoryInputError, match="invalid message"):
        await alice.add({"role": "user", "content": "x", "importance": "high"})
    first = (await alice.get())[0]
    with pytest.raises(MemoryInputError, match="already stored"):
        await alice.add(first)
    assert await alice.size() == 3  # nothing of a refused batch was stored


async def test_oversized_message_is_refused(memory_rt: MemoryRuntime) -> None:
    alice = memory_rt.memory("alice")
    limit = memory_rt.app_config.memory.max_message_chars
    with pytest.raises(MemoryInputError, match=f"the limit is {limit}"):
        await alice.add({"role": "user", "content": "x" * (limit + 1)})
    assert await alice.size() == 0


async def test_get_filters(memory_rt: MemoryRuntime) -> None:
    alice = memory_rt.memory("alice")
    msgs = chat()
    await alice.add(msgs)
    assert [m.id for m in await alice.recent(2)] == [msgs[5].id, msgs[6].id]
    assert await alice.recent(0) == []
    assert [m.id for m in await alice.by_role("tool")] == [msgs[3].id]
    assert [m.name for m in await alice.get(names=["bob", "carol"])] == ["bob", "carol"]
    assert [m.id for m in await alice.get(metadata={"category": "fact"})] == [msgs[5].id]
    assert [m.id for m in await alice.important()] == [msgs[5].id, msgs[6].id]
    assert [m.id for m in await alice.get(roles=["assistant"], recent_n=1)] == [msgs[6].id]
    # More than there are: all of them.
    assert [m.id for m in await alice.get(recent_n=len(msgs) + 3)] == [m.id for m in msgs]
    with pytest.raises(MemoryInputError, match="recent_n must be an int >= 0"):
        await alice.get(recent_n=-1)


async def test_get_by_time_range(memory_rt: MemoryRuntime) -> None:
    alice = memory_rt.memory("alice")
    now = time.time()
    await alice.add([Message(role="user", content=f"m{i}", timestamp=now + i) for i in range(5)])
    found = await alice.get(since=now + 1, until=now + 3)
    assert [m.content for m in found] == ["m1", "m2"]


async def test_search_substring_and_ranked(memory_rt: MemoryRuntime) -> None:
    alice = memory_rt.memory("alice")
    msgs = chat()
    await alice.add(msgs)
    hits = await alice.search("PARIS")
    assert [m.id for m in hits] == [msgs[1].id, msgs[2].id, msgs[4].id]  # tool args count too
    assert [m.id for m in await alice.search("paris", k=1)] == [msgs[4].id]
    ranked = await alice.search("vault code", mode="ranked", k=3)
    assert ranked[0].id == msgs[5].id
    assert await alice.search("zeppelin", mode="ranked") == []
    with pytest.raises(MemoryInputError, match="query must be a non-empty string"):
        await alice.search("   ")
    with pytest.raises(MemoryInputError, match="mode must be one of"):
        await alice.search("x", mode="fuzzy")


async def test_delete_by_id_and_index_is_all_or_nothing(memory_rt: MemoryRuntime) -> None:
    alice = memory_rt.memory("alice")
    msgs = chat()
    await alice.add(msgs)
    with pytest.raises(MemoryInputError, match="no message with id 'nope'"):
        await alice.delete(msgs[1].id, "nope")
    with pytest.raises(MemoryInputError, match="index 7 is out of range"):
        await alice.delete(7)
    assert await alice.size() == 7
    assert await alice.delete(msgs[1].id, 0) == 2
    assert [m.id for m in await alice.get()] == [m.id for m in msgs[2:]]
    # The original history keeps what the working view lost.
    assert len(await alice.get(scope="history")) == 7


async def test_clear_keeps_history_unless_asked(memory_rt: MemoryRuntime) -> None:
    alice = memory_rt.memory("alice")
    await alice.add(chat())
    assert await alice.clear() == 7
    stats = await alice.stats()
    assert (stats.size, stats.working_tokens, stats.history_size) == (0, 0, 7)
    assert len(await alice.search("vault", scope="history")) == 1
    await alice.clear(history=True)
    assert (await alice.stats()).history_size == 0


async def test_export_and_load_overwrite_and_merge(
    memory_rt: MemoryRuntime, tmp_path: Path
) -> None:
    alice = memory_rt.memory("alice")
    msgs = chat()
    await alice.add(msgs)
    path = tmp_path / "alice.json"
    exported = await alice.export(path)
    assert [m.id for m in exported.working] == [m.id for m in msgs]

    bob = memory_rt.memory("bob")
    await bob.add({"role": "user", "content": "bob's own"})
    assert await bob.load(path) == 7  # merge
    assert await bob.size() == 8
    assert await bob.load(path) == 0  # merging again adds nothing
    assert await bob.load(path, overwrite=True) == 7
    assert [m.id for m in await bob.get()] == [m.id for m in msgs]
    assert (await bob.stats()).history_size == 8  # history only grows

    carol = memory_rt.memory("carol")
    assert await carol.load(msgs[:2]) == 2


async def test_load_refuses_bad_input_and_changes_nothing(
    memory_rt: MemoryRuntime, tmp_path: Path
) -> None:
    alice = memory_rt.memory("alice")
    await alice.add(chat())
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": 1, "working": [{"role": "tool", "content": "x"}]}')
    with pytest.raises(MemoryInputError, match="not a valid memory export"):
        await alice.load(bad, overwrite=True)
    with pytest.raises(MemoryInputError, match="cannot read export"):
        await alice.load(tmp_path / "missing.json")
    with pytest.raises(MemoryInputError, match="version 99 is not supported"):
        await alice.load(MemoryExport(version=99), overwrite=True)
    dup = Message(role="user", content="x")
    with pytest.raises(MemoryInputError, match="appears twice"):
        await alice.load(MemoryExport(working=[dup, dup]), overwrite=True)
    assert await alice.size() == 7


async def test_context_is_openai_ready_and_within_budget(memory_rt: MemoryRuntime) -> None:
    alice = memory_rt.memory("alice")
    await alice.add(chat())
    full = await alice.context()
    assert check_openai_messages(full) == []
    assert full[0]["role"] == "system"
    assert [m.get("content") for m in full] == [m.to_openai()["content"] for m in chat()]
    # Where the important fact no longer fits, core memory brings it back, quoted.
    await alice.add([{"role": "user", "content": f"small talk number {i}"} for i in range(80)])
    small = await alice.context(600)
    assert all("4821" not in str(m["content"]) for m in small[2:])
    assert small[1]["role"] == "system" and "<core_memory>" in small[1]["content"]
    assert '"The vault code is 4821."' in small[1]["content"]
    await alice.delete(*range(-80, 0))
    counter = get_counter()
    system, newest = chat()[0].to_openai(), chat()[-1].to_openai()
    needed = counter.count_messages([system, newest])
    for budget in range(needed, counter.count_messages(full) + 5):
        ctx = await alice.context(budget)
        assert check_openai_messages(ctx) == []
        assert counter.count_messages(ctx) <= budget
        assert ctx[0] == system
        assert ctx[-1] == newest
    # Below the system prompt and the newest message, the error says what they need.
    with pytest.raises(ContextBudgetError, match=f"needs {needed} tokens") as caught:
        await alice.context(needed - 1)
    assert caught.value.needed == needed
    with pytest.raises(ContextBudgetError, match=f"needs {needed} tokens"):
        await alice.context(3)
    with pytest.raises(MemoryInputError, match="max_tokens"):
        await alice.context(0)


async def test_context_never_sends_a_call_without_its_results(memory_rt: MemoryRuntime) -> None:
    alice = memory_rt.memory("alice")
    await alice.add(
        [
            Message(role="user", content="check two things"),
            Message(role="assistant", tool_calls=(ToolCall("a", "f"), ToolCall("b", "g"))),
            Message(role="tool", tool_call_id="a", content="A done"),
        ]
    )
    ctx = await alice.context()
    assert [m["role"] for m in ctx] == ["user"]  # the call is still waiting for 'b'
    await alice.add(Message(role="tool", tool_call_id="b", content="B done"))
    ctx = await alice.context()
    assert [m["role"] for m in ctx] == ["user", "assistant", "tool", "tool"]
    assert check_openai_messages(ctx) == []


async def test_prune_keeps_system_and_pairs(memory_rt: MemoryRuntime) -> None:
    alice = memory_rt.memory("alice")
    msgs = chat()
    await alice.add(msgs)
    stats = await alice.stats()
    result = await alice.prune(stats.working_tokens - 1)
    assert result.removed >= 1
    kept = await alice.get()
    assert kept[0].role == "system"
    assert result.working_tokens == sum(m.tokens for m in kept)
    assert result.working_tokens <= stats.working_tokens - 1
    assert check_openai_messages([m.to_openai() for m in kept]) == []
    # A budget that splits the tool pair drops both halves.
    tiny = await alice.prune(msgs[0].tokens if msgs[0].tokens > 0 else 1)
    assert tiny.working_tokens <= sum(m.tokens for m in (await alice.get()))
    assert [m.role for m in await alice.get()] == ["system"]
    assert (await alice.stats()).history_size == 7
    with pytest.raises(MemoryInputError, match="max_tokens must be an int >= 1"):
        await alice.prune(0)


async def test_prune_without_preserving_system(memory_rt: MemoryRuntime) -> None:
    alice = memory_rt.memory("alice")
    await alice.add(chat())
    last = (await alice.get())[-1]
    await alice.prune(last.tokens, preserve_system=False)
    assert [m.id for m in await alice.get()] == [last.id]


async def test_reload_of_unknown_id_is_a_clear_error(memory_rt: MemoryRuntime) -> None:
    with pytest.raises(MemoryInputError, match="no offloaded content with id 'x'"):
        await memory_rt.memory("alice").reload("x")


async def test_agents_do_not_see_each_other(memory_rt: MemoryRuntime) -> None:
    await memory_rt.memory("alice").add({"role": "user", "content": "alice's secret"})
    bob = memory_rt.memory("bob")
    assert await bob.search("secret", scope="history") == []
    assert await bob.size() == 0


async def test_bad_agent_names() -> None:
    async with MemoryRuntime() as rt:
        for name in ("", "  ", "a\nb", "x" * 300):
            with pytest.raises(MemoryInputError, match="agent name"):
                rt.memory(name)


async def test_durable_state_round_trips_through_changes_and_restore(
    memory_rt: MemoryRuntime,
) -> None:
    from actormem.actors.memory.actor import AgentMemory, memory_factory
    from actormem.runtime import ActorContext

    factory = memory_factory(memory_rt.app_config)
    first = factory(ActorContext(memory_rt, "memory/durable"))
    first.durable_restore(None, [])  # what the Redis transport does on activation
    stored = StoredState()

    async def apply(command: object) -> object:
        reply = await first.receive(command)
        stored.keep(first)
        return reply

    from actormem.actors.memory.commands import Add, Clear, Delete, Search

    msgs = chat()
    await apply(Add(messages=msgs[:4]))
    await apply(Add(messages=msgs[4:]))
    await apply(Delete(ids=[msgs[1].id], indices=[]))
    assert len(stored.log) == 7  # history entries travel once each

    second: AgentMemory = factory(ActorContext(memory_rt, "memory/durable"))
    second.durable_restore(stored.snapshot, stored.log)
    found = await second.receive(Search(query="vault"))
    assert [m.id for m in found] == [m.id for m in msgs if "vault" in m.text()]
    assert [m.id for m in second._store.working] == [m.id for m in first._store.working]
    assert second._stats() == first._stats()

    await apply(Clear(history=True))
    third = factory(ActorContext(memory_rt, "memory/durable"))
    third.durable_restore(stored.snapshot, stored.log)
    assert third._stats().history_size == 0
    assert stored.log == []  # erased, not skipped


async def test_a_memory_keeps_what_it_was_given_when_the_caller_changes_its_objects(
    memory_rt: MemoryRuntime,
) -> None:
    """On both transports the memory holds its own copy of each message's dicts and
    lists: a caller that reuses or changes them afterwards changes nothing stored."""
    memory = memory_rt.memory("alice")
    tags: dict[str, Any] = {"category": "fact", "seen_by": ["bob"]}
    parts: list[Any] = [{"type": "text", "text": "the key is under the pot"}]
    plain = Message(role="user", content="hello")
    await memory.add([Message(role="user", content=parts, metadata=tags), plain])
    await memory.add({"role": "user", "content": "again", "metadata": tags})
    tags["category"] = "rumour"
    tags["seen_by"].append("eve")
    parts[0]["text"] = "changed"
    plain.metadata["injected"] = True
    stored = await memory.get()
    assert [m.metadata for m in stored] == [
        {"category": "fact", "seen_by": ["bob"]},
        {},
        {"category": "fact", "seen_by": ["bob"]},
    ]
    assert stored[0].content == [{"type": "text", "text": "the key is under the pot"}]


async def test_a_memory_keeps_what_it_answered_when_the_asker_changes_it(
    memory_rt: MemoryRuntime,
) -> None:
    """On both transports the messages a query answers with, and the content parts in
    a context, are the asker's own: an asker that changes their dicts and lists
    changes nothing stored."""
    memory = memory_rt.memory("alice")
    await memory.add(
        [
            Message(role="user", content="the key is under the pot", metadata={"seen_by": []}),
            Message(role="user", content=[{"type": "text", "text": "parts"}]),
        ]
    )
    first, second = await memory.get()
    found = (await memory.search("key"))[0]
    marked = await memory.mark(first.id, tag="fact")
    exported = await memory.export()
    for message in (first, found, marked, exported.working[0], exported.history[0]):
        message.metadata["injected"] = True
        message.metadata.get("seen_by", []).append("eve")
    assert isinstance(second.content, list)
    second.content[0]["text"] = "changed"
    sent = (await memory.context())[-1]["content"]
    assert isinstance(sent, list)
    sent[0]["text"] = "changed too"
    sent.append({"type": "text", "text": "more"})
    stored = await memory.get()
    assert [m.metadata for m in stored] == [{"seen_by": [], "tag": "fact"}, {}]
    assert stored[1].content == [{"type": "text", "text": "parts"}]
