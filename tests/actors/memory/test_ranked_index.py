"""The standing ranked indexes of search and retrieve: they follow what they index,
are not built again when the working view is rewritten, and keep no word of what
was erased."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from actormem.actors import MemoryRuntime, Message
from actormem.actors.memory.commands import Search
from actormem.actors.memory.queries import MessageQueries
from actormem.actors.recall.longterm import LongTermMemory
from actormem.actors.text.ranker import Ranker

pytestmark = pytest.mark.anyio

CANARY = "zq7canary"
TOPICS = ("harbour ferry", "bread oven", "river mill", "lamp bridge", "owl vault")


def _turns(start: int, n: int) -> list[Message]:
    return [
        Message(role="user", name="ana", content=f"{TOPICS[i % len(TOPICS)]} turn {i}")
        for i in range(start, start + n)
    ]


def _actor(rt: MemoryRuntime, agent: str) -> Any:
    return rt._cells[f"memory/{agent}"].actor


def _ranked(queries: MessageQueries, scope: str) -> list[list[str]]:
    return [
        [m.id for m in queries.search(Search(query=q, mode="ranked", k=5, scope=scope))]
        for q in ("harbour", "river mill", "owl", "summary")
    ]


def _holds(obj: object, text: str) -> bool:
    """True when ``text`` is in any attribute of ``obj`` (its reprs, recursively)."""
    return text in repr(vars(obj))


async def test_the_history_index_stands_through_rewrites_of_the_working_view() -> None:
    async with MemoryRuntime() as rt:
        mem = rt.memory("ana")
        first = _turns(0, 30)
        await mem.add(first)
        await mem.search("harbour", mode="ranked", scope="history")
        queries = _actor(rt, "ana")._queries
        built = queries._ranked["history"].ranker
        # Rewrites of the working view: a summary, a delete, a prune; then more turns.
        await mem.set_summary("summary of the ferry talk", replaces=[m.id for m in first[:4]])
        await mem.delete(first[10].id)
        await mem.prune(60)
        await mem.add(_turns(30, 10))
        assert _ranked(queries, "history") == _ranked(
            MessageQueries(queries._store, 1.0), "history"
        )
        assert queries._ranked["history"].ranker is built
        # The working view's index follows its rewrites: the summary is in it, what
        # it replaced and what was pruned are not.
        assert _ranked(queries, "working") == _ranked(
            MessageQueries(queries._store, 1.0), "working"
        )
        working = {m.id for m in await mem.get()}
        assert all(i in working for found in _ranked(queries, "working") for i in found)


async def test_a_search_filtered_by_roles_keeps_its_own_index() -> None:
    async with MemoryRuntime() as rt:
        mem = rt.memory("ana")
        replies = [Message(role="assistant", content=f"the harbour reply {i}") for i in range(4)]
        await mem.add([*_turns(0, 20), *replies])
        found = await mem.search("harbour", mode="ranked", roles=["assistant"], scope="history")
        assert {m.id for m in found} == {m.id for m in replies}
        queries = _actor(rt, "ana")._queries
        built = queries._ranked["filtered"].ranker
        late, asked = (
            Message(role="assistant", content="a mooring rope"),
            Message(role="user", content="mooring"),
        )
        await mem.add([*_turns(20, 5), late, asked])
        found = await mem.search("mooring", mode="ranked", roles=["assistant"], scope="history")
        assert found[0].id == late.id and {m.role for m in found} == {"assistant"}
        assert queries._ranked["filtered"].ranker is built
        # The unfiltered index of the scope is another one.
        found = await mem.search("mooring", mode="ranked", scope="history")
        assert {late.id, asked.id} <= {m.id for m in found}


async def test_the_offloaded_index_follows_new_blocks_and_rebuilds_for_replaced_ones() -> None:
    async with MemoryRuntime() as rt:
        mem = rt.memory("ana")
        first = _turns(0, 12)
        await mem.add(first)
        await mem.set_summary("summary one", replaces=[m.id for m in first[:4]])
        assert await mem.search("harbour", mode="ranked", scope="offloaded")
        queries = _actor(rt, "ana")._queries
        built = queries._ranked["offloaded"].ranker
        # A second block comes after the first: the index catches up.
        await mem.set_summary("summary two", replaces=[m.id for m in first[4:8]])
        assert _ranked(queries, "offloaded") == _ranked(
            MessageQueries(queries._store, 1.0), "offloaded"
        )
        assert queries._ranked["offloaded"].ranker is built
        # A load replaces the first block with other text: built again.
        export = await mem.export()
        block = next(iter(export.offloaded))
        replaced = [Message(role="user", name="ana", content=f"the owl said {CANARY}")]
        await mem.load(msgspec.structs.replace(export, offloaded={block: replaced}))
        found = await mem.search(CANARY, mode="ranked", scope="offloaded")
        assert found[0].content == replaced[0].content
        assert not {m.id for m in found} & {m.id for m in first[:4]}
        assert queries._ranked["offloaded"].ranker is not built
        assert _ranked(queries, "offloaded") == _ranked(
            MessageQueries(queries._store, 1.0), "offloaded"
        )


async def test_wiping_the_history_drops_the_ranked_indexes() -> None:
    async with MemoryRuntime() as rt:
        mem = rt.memory("ana")
        await mem.add([*_turns(0, 5), Message(role="user", content=f"the code is {CANARY}")])
        for scope in ("working", "history"):
            assert await mem.search(CANARY, mode="ranked", scope=scope)
        queries = _actor(rt, "ana")._queries
        await mem.clear(history=True)
        assert queries._ranked == {}
        await mem.add(_turns(5, 3))
        assert await mem.search(CANARY, mode="ranked", scope="history") == []
        await mem.search("harbour", mode="ranked", scope="history")
        await mem.forget()
        assert queries._ranked == {}


def test_a_removed_document_leaves_none_of_its_words_behind() -> None:
    ranker = Ranker()
    ranker.add("the harbour ferry", "ana")
    ranker.add(f"the vault code is {CANARY}", f"{CANARY} bot")
    ranker.add("the river mill", "ana")
    assert ranker.top(CANARY, 1)[0][0] == 1
    ranker.remove(1)
    assert not _holds(ranker, CANARY)
    assert ranker.top(CANARY, 5) == []
    assert ranker.top("river", 1)[0][0] == 2


def test_long_term_memory_drops_forgotten_text_from_its_index() -> None:
    longterm = LongTermMemory()
    longterm.record(_turns(0, 10))
    [canary] = longterm.record([Message(role="user", name=CANARY, content=f"code {CANARY}")])
    assert canary.id in [r.entry.id for r in longterm.retrieve_lexical(CANARY, 3)]
    ranker = longterm._ranker
    assert ranker is not None
    assert longterm.forget(canary.id)
    assert not _holds(ranker, CANARY)
    assert longterm.retrieve_lexical(CANARY, 3) == []
    longterm.clear()
    assert longterm._ranker is None


def test_long_term_memory_ranks_the_same_after_a_restore() -> None:
    now = [1_700_000_000.0]
    longterm = LongTermMemory(clock=lambda: now[0])
    longterm.record(_turns(0, 40))
    longterm.forget(longterm.entries()[3].id)
    queries = ("harbour ferry", "river", "owl vault turn 7")

    def ranked(memory: LongTermMemory) -> list[list[str]]:
        return [[r.entry.id for r in memory.retrieve_lexical(q, 5)] for q in queries]

    restored = LongTermMemory(clock=lambda: now[0])
    restored.load_state(longterm.export_state())
    assert ranked(restored) == ranked(longterm)
