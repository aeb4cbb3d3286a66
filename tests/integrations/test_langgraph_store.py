"""The LangGraph store over agents' keyed long-term entries, through LangGraph's own
BaseStore API, on both transports."""

from __future__ import annotations

from datetime import datetime

import anyio
import anyio.to_thread
import pytest
from langgraph.store.base import GetOp, PutOp, SearchOp

from actormem import MemoryInputError, MemoryRuntime
from actormem.actors.integrations.langgraph import MemoryStore

pytestmark = pytest.mark.anyio


async def test_put_get_search_delete_and_list_act_on_the_namespaces_agent(
    memory_rt: MemoryRuntime,
) -> None:
    store = MemoryStore(memory_rt)
    await store.aput(("alice", "facts"), "colour", {"fact": "Alice likes teal", "n": 1})
    await store.aput(("alice", "facts"), "pet", {"fact": "Alice has a cat", "n": 2})
    await store.aput(("alice", "plans"), "trip", {"fact": "a trip to Oslo", "n": 3})
    await store.aput(("bob", "facts"), "colour", {"fact": "Bob likes red"})

    item = await store.aget(("alice", "facts"), "colour")
    assert item is not None and item.value == {"fact": "Alice likes teal", "n": 1}
    assert item.namespace == ("alice", "facts") and isinstance(item.created_at, datetime)
    # The namespace's first label is the agent: the entry lives in Alice's memory.
    entry = await memory_rt.memory("alice").get_entry(("alice", "facts"), "colour")
    assert entry is not None and entry.value == item.value
    assert await memory_rt.memory("bob").get_entry(("alice", "facts"), "colour") is None

    found = await store.asearch(("alice",), query="cat")
    assert [i.key for i in found] == ["pet"] and found[0].score is not None
    assert [i.key for i in await store.asearch(("alice",), filter={"n": {"$gt": 1}})] == [
        "trip",
        "pet",
    ]
    assert [i.key for i in await store.asearch(("alice", "facts"), limit=1, offset=1)] == ["colour"]
    assert await store.alist_namespaces(prefix=("alice",)) == [
        ("alice", "facts"),
        ("alice", "plans"),
    ]
    assert await store.alist_namespaces(prefix=("alice",), suffix=("plans",)) == [
        ("alice", "plans")
    ]
    assert await store.alist_namespaces(prefix=("alice",), max_depth=1) == [("alice",)]

    await store.adelete(("alice", "facts"), "colour")
    assert await store.aget(("alice", "facts"), "colour") is None
    assert (await store.aget(("bob", "facts"), "colour")) is not None

    # A put's index names the fields a query matches; False leaves the item out.
    await store.aput(("alice", "docs"), "d1", {"title": "moon", "body": "sun"}, index=["title"])
    await store.aput(("alice", "docs"), "d2", {"title": "sun"}, index=False)
    assert [i.key for i in await store.asearch(("alice", "docs"), query="moon")] == ["d1"]
    assert await store.asearch(("alice", "docs"), query="sun") == []


async def test_batch_runs_its_operations_in_order(memory_rt: MemoryRuntime) -> None:
    store = MemoryStore(memory_rt)
    results = await store.abatch(
        [
            PutOp(("alice", "a"), "k", {"v": 1}),
            GetOp(("alice", "a"), "k"),
            PutOp(("alice", "a"), "k", None),
            GetOp(("alice", "a"), "k"),
            SearchOp(("alice",)),
        ]
    )
    assert results[0] is None and results[2] is None
    assert results[1] is not None and results[1].value == {"v": 1}  # type: ignore[union-attr]
    assert results[3] is None and results[4] == []


async def test_a_ttl_in_minutes_expires_the_item(memory_rt: MemoryRuntime) -> None:
    store = MemoryStore(memory_rt, ttl={"default_ttl": 0.001})  # 60 ms
    assert store.supports_ttl
    await store.aput(("alice", "tmp"), "short", {"v": "soon gone"})
    await store.aput(("alice", "tmp"), "long", {"v": "stays"}, ttl=60)
    await store.aput(("alice", "tmp"), "forever", {"v": "stays"}, ttl=None)
    entry = await memory_rt.memory("alice").get_entry(("alice", "tmp"), "long")
    assert entry is not None and entry.ttl == 3600.0
    await anyio.sleep(0.2)
    assert await store.aget(("alice", "tmp"), "short") is None
    assert [i.key for i in await store.asearch(("alice", "tmp"))] == ["forever", "long"]


async def test_the_sync_api_works_from_a_thread_and_refuses_the_loops_own(
    memory_rt: MemoryRuntime,
) -> None:
    store = MemoryStore(memory_rt)
    await anyio.to_thread.run_sync(lambda: store.put(("alice", "s"), "k", {"v": "sync"}))
    item = await anyio.to_thread.run_sync(lambda: store.get(("alice", "s"), "k"))
    assert item is not None and item.value == {"v": "sync"}
    assert await anyio.to_thread.run_sync(lambda: store.list_namespaces(prefix=("alice",))) == [
        ("alice", "s")
    ]
    with pytest.raises(RuntimeError, match="use aget, aput"):
        store.get(("alice", "s"), "k")


async def test_bad_input_is_a_memory_input_error(memory_rt: MemoryRuntime) -> None:
    store = MemoryStore(memory_rt)
    with pytest.raises(MemoryInputError, match="names no agent"):
        await store.asearch((), query="x")
    with pytest.raises(MemoryInputError, match="names no agent"):
        await store.alist_namespaces()
    with pytest.raises(MemoryInputError, match=r"value\.when is .*not JSON"):
        await store.aput(("alice",), "k", {"when": datetime(2020, 1, 1)})
    with pytest.raises(MemoryInputError, match="key must be a non-empty string"):
        await store.aget(("alice",), "")
    with pytest.raises(MemoryInputError, match="index must be False, None or a list"):
        await store.aput(("alice",), "k", {"v": 1}, index="title")  # type: ignore[arg-type]
    assert await memory_rt.memory("alice").list_namespaces() == []


async def test_agent_for_maps_namespaces_to_agents(memory_rt: MemoryRuntime) -> None:
    store = MemoryStore(memory_rt, agent_for=lambda ns: f"user-{ns[1]}" if len(ns) > 1 else "all")
    await store.aput(("profiles", "ann"), "name", {"name": "Ann"})
    entry = await memory_rt.memory("user-ann").get_entry(("profiles", "ann"), "name")
    assert entry is not None and entry.value == {"name": "Ann"}
    assert [i.key for i in await store.asearch(("profiles", "ann"))] == ["name"]


async def test_reads_refresh_the_ttl_unless_the_config_says_not(memory_rt: MemoryRuntime) -> None:
    alice = memory_rt.memory("alice")
    for refresh in (True, False):
        store = MemoryStore(memory_rt, ttl={"default_ttl": 10, "refresh_on_read": refresh})
        ns = ("alice", f"refresh-{refresh}")
        await store.aput(ns, "k", {"v": 1})
        put = await alice.get_entry(ns, "k", refresh_ttl=False)
        assert put is not None and put.expires is not None
        await anyio.sleep(0.01)
        await store.aget(ns, "k")
        await store.asearch(ns)
        read = await alice.get_entry(ns, "k", refresh_ttl=False)
        assert read is not None and read.expires is not None
        assert (read.expires > put.expires) is refresh


async def test_clearing_the_history_erases_the_items(memory_rt: MemoryRuntime) -> None:
    store = MemoryStore(memory_rt)
    await store.aput(("alice", "facts"), "k", {"v": 1})
    await memory_rt.memory("alice").clear(history=True)
    assert await store.aget(("alice", "facts"), "k") is None
