"""Keyed long-term entries: the part itself (with a fake clock), and through the
handle on both transports (durable over Redis, erased by forget)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from actormem.actors import AppConfig, MemoryInputError, MemoryRuntime
from actormem.actors.recall.keyed import KeyedEntries, KeyedState
from actormem.actors.recall.longterm import LongTermConfig
from actormem.runtime import Transport


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def keyed(clock: Clock) -> KeyedEntries:
    return KeyedEntries(LongTermConfig(max_entries=5), clock=clock)


def test_put_replaces_under_the_same_key_and_keeps_when_it_was_created(
    keyed: KeyedEntries, clock: Clock
) -> None:
    first = keyed.put(("alice", "facts"), "colour", {"fact": "blue"})
    clock.now += 10
    second = keyed.put(("alice", "facts"), "colour", {"fact": "teal"}, importance=0.9)
    assert len(keyed) == 1
    assert second.created == first.created and second.updated == first.updated + 10
    got = keyed.get(("alice", "facts"), "colour")
    assert got is not None and got.value == {"fact": "teal"} and got.importance == 0.9
    assert got.text == "teal"  # the value's strings, by default
    assert keyed.get(("alice", "other"), "colour") is None
    assert keyed.delete(("alice", "facts"), "colour") is True
    assert keyed.delete(("alice", "facts"), "colour") is False
    assert keyed.get(("alice", "facts"), "colour") is None


def test_search_ranks_within_a_prefix_and_filters_and_pages(
    keyed: KeyedEntries, clock: Clock
) -> None:
    keyed.put(("a", "food"), "1", {"likes": "green tea and rice", "n": 1})
    keyed.put(("a", "food"), "2", {"likes": "black coffee", "n": 2})
    keyed.put(("a", "pets"), "3", {"likes": "a grey cat called Miso", "n": 3})
    keyed.put(("b", "food"), "4", {"likes": "tea"}, text="tea tea tea")
    clock.now += 5
    found = keyed.search(("a",), "tea")
    assert [f.entry.key for f in found] == ["1"]  # only entries sharing a word
    assert found[0].score is not None
    # No query: the most recently written first, every entry of the prefix.
    keyed.put(("a", "food"), "2", {"likes": "black coffee", "n": 2})
    assert [f.entry.key for f in keyed.search(("a",))] == ["2", "3", "1"]
    assert all(f.score is None for f in keyed.search(("a",)))
    assert [f.entry.key for f in keyed.search(("a", "food"))] == ["2", "1"]
    assert [f.entry.key for f in keyed.search((), limit=2, offset=1)] == ["4", "3"]
    assert [f.entry.key for f in keyed.search(("a",), filter={"n": {"$gte": 2}})] == ["2", "3"]
    assert [f.entry.key for f in keyed.search(("a",), filter={"n": 1})] == ["1"]
    assert [f.entry.key for f in keyed.search(("a",), filter={"n": {"$ne": 1}})] == ["2", "3"]
    # A value that does not compare with the operand does not match.
    assert keyed.search(("a",), filter={"likes": {"$gt": 3}}) == []
    # A nested dict whose keys are not all operators matches the nested value.
    keyed.put(("a", "deep"), "5", {"meta": {"tag": "x"}})
    assert [f.entry.key for f in keyed.search(("a", "deep"), filter={"meta": {"tag": "x"}})] == [
        "5"
    ]
    assert keyed.search(("a", "deep"), filter={"meta": {1: "x"}}) == []
    with pytest.raises(MemoryInputError, match=r"unknown filter operator '\$near'"):
        keyed.search(("a",), filter={"n": {"$near": 1}})


def test_namespaces_by_prefix_suffix_wildcard_and_depth(keyed: KeyedEntries) -> None:
    for ns in [("a", "x", "v1"), ("a", "y", "v2"), ("a", "y", "v1"), ("b", "x")]:
        keyed.put(ns, "k", {"v": 1})
    assert keyed.namespaces(("a",)) == [("a", "x", "v1"), ("a", "y", "v1"), ("a", "y", "v2")]
    assert keyed.namespaces(("a",), ("v1",)) == [("a", "x", "v1"), ("a", "y", "v1")]
    assert keyed.namespaces(("*", "x")) == [("a", "x", "v1"), ("b", "x")]
    assert keyed.namespaces(("a",), max_depth=2) == [("a", "x"), ("a", "y")]
    assert keyed.namespaces(limit=1, offset=1) == [("a", "y", "v1")]


def test_an_entry_expires_after_its_ttl_unless_a_read_refreshes_it(
    keyed: KeyedEntries, clock: Clock
) -> None:
    keyed.put(("a",), "short", {"v": "one"}, ttl=60)
    keyed.put(("a",), "kept", {"v": "two"}, ttl=60)
    clock.now += 50
    assert keyed.get(("a",), "kept") is not None  # refreshed: 60 s from now
    assert keyed.get(("a",), "short", refresh_ttl=False) is not None
    clock.now += 20
    assert keyed.get(("a",), "short") is None
    assert [f.entry.key for f in keyed.search(("a",))] == ["kept"]
    assert len(keyed) == 1  # the expired entry is gone from the state
    clock.now += 61
    assert keyed.namespaces() == []
    # A snapshot never holds an expired entry.
    keyed.put(("a",), "again", {"v": "three"}, ttl=1)
    keyed.put(("a",), "forever", {"v": "four"})
    clock.now += 2
    state = keyed.export_state()
    assert [e.key for e in state.entries] == ["forever"]
    restored = KeyedEntries(clock=clock)
    restored.load_state(KeyedState(entries=state.entries, accessed=state.accessed))
    assert restored.get(("a",), "forever") == keyed.get(("a",), "forever")


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda k: k.put(("a",), "", {}), "key must be a non-empty string"),
        (lambda k: k.put(("a",), "k", ["x"]), r"value must be a JSON object \(a dict\)"),
        (lambda k: k.put(("a",), "k", {"when": {1, 2}}), r"value\.when is \{1, 2\}, not JSON"),
        (lambda k: k.put(("a",), "k", {"x": float("nan")}), "JSON cannot hold"),
        (lambda k: k.put(("a",), "k", {1: "x"}), "JSON keys are strings"),
        (lambda k: k.put((), "k", {}), "namespace must have at least one label"),
        (lambda k: k.put(("a", ""), "k", {}), "namespace label '' must be 1..256"),
        (lambda k: k.put("ab", "k", {}), "namespace must be a tuple of strings"),
        (lambda k: k.put(("a",), "k", {}, ttl=0), "ttl must be a positive number"),
        (lambda k: k.put(("a",), "k", {}, importance=2), "importance must be within 0..1"),
        (lambda k: k.put(("a",), "k", {"x": "y" * 70_000}), "at most 65536"),
        (lambda k: k.search(("a",), limit=0), r"limit must be an int within 1\.\.1000"),
        (lambda k: k.namespaces(max_depth=0), "max_depth must be an int >= 1"),
    ],
)
def test_bad_input_is_refused_by_name_and_changes_nothing(
    keyed: KeyedEntries, call: Callable[[KeyedEntries], object], error: str
) -> None:
    keyed.put(("a",), "k", {"v": 1})
    before = keyed.export_state()
    with pytest.raises(MemoryInputError, match=error):
        call(keyed)
    assert keyed.export_state() == before


def test_a_full_memory_refuses_a_new_key_but_replaces_an_old_one(keyed: KeyedEntries) -> None:
    for n in range(5):
        keyed.put(("a",), str(n), {"n": n})
    with pytest.raises(MemoryInputError, match="max_entries"):
        keyed.put(("a",), "new", {"n": 9})
    assert keyed.put(("a",), "0", {"n": 10}).value == {"n": 10}
    assert len(keyed) == 5


# -- through the handle, on both transports ----------------------------------------------


@pytest.mark.anyio
async def test_the_handle_serves_keyed_entries_and_forget_erases_them(
    memory_rt: MemoryRuntime,
) -> None:
    alice = memory_rt.memory("alice")
    entry = await alice.put_entry(["alice", "facts"], "colour", {"fact": "likes teal"})
    assert entry.namespace == ("alice", "facts")
    assert await alice.get_entry(("alice", "facts"), "colour") == entry
    await alice.put_entry(("alice", "notes"), "n1", {"text": "teal boat"}, ttl=3600)
    found = await alice.search_entries(("alice",), "teal", limit=5)
    assert {f.entry.key for f in found} == {"colour", "n1"}
    assert await alice.list_namespaces(("alice",)) == [("alice", "facts"), ("alice", "notes")]
    assert await memory_rt.memory("bob").get_entry(("alice", "facts"), "colour") is None
    with pytest.raises(MemoryInputError, match="key must be a non-empty string"):
        await alice.get_entry(("alice",), "")
    with pytest.raises(MemoryInputError, match=r"value\.when is"):
        await alice.put_entry(("alice",), "k", {"when": b"bytes"})
    assert (await alice.stats()).longterm_entries == 0  # keyed entries are apart
    assert await alice.delete_entry(("alice", "notes"), "n1") is True
    await alice.forget()
    assert await alice.get_entry(("alice", "facts"), "colour") is None
    assert await alice.list_namespaces() == []


@pytest.mark.anyio
async def test_keyed_entries_are_durable_over_redis(
    make_redis_transport: Callable[[], Transport],
) -> None:
    async with MemoryRuntime(AppConfig(), transport=make_redis_transport()) as rt:
        alice = rt.memory("alice")
        await alice.add({"role": "user", "content": "hello"})
        await alice.put_entry(("alice", "facts"), "colour", {"fact": "likes teal"})
        await alice.put_entry(("alice", "facts"), "gone", {"fact": "temporary"})
        await alice.delete_entry(("alice", "facts"), "gone")
    async with MemoryRuntime(AppConfig(), transport=make_redis_transport()) as rt:
        alice = rt.memory("alice")
        got = await alice.get_entry(("alice", "facts"), "colour")
        assert got is not None and got.value == {"fact": "likes teal"}
        assert await alice.get_entry(("alice", "facts"), "gone") is None
        assert (await alice.stats()).history_size == 1
