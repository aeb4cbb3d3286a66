"""A memory's durable state: what a reload rebuilds equals what was there.

The Redis transport stores an agent's history as an append-only log and the rest
as a snapshot written only when the state moved beyond what replaying plain adds
restores. These tests drive random command sequences through an agent memory,
keep what ``durable_changes`` hands out as the transport would, and reload a
fresh actor from it at random points.
"""

from __future__ import annotations

from typing import Any

import anyio
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actormem.actors import MemoryInputError, MemoryRuntime, Message
from actormem.actors.memory._pool_side import DELIVERIES_KEPT
from actormem.actors.memory.actor import AgentMemory, memory_factory
from actormem.actors.memory.commands import (
    Add,
    Clear,
    Context,
    Delete,
    GetEntry,
    HeldInsights,
    Prune,
    PutEntry,
    Record,
    Retrieve,
    Search,
    SetSummary,
    StartEpisode,
    ToPool,
    Update,
)
from actormem.actors.memory.snapshot import (
    MemorySnapshot,
    encode_snapshot,
    is_logged_delivery,
)
from actormem.actors.pool.commands import Share
from actormem.actors.pool.insights import Insight, InsightDelivery
from actormem.actors.recall.agent import AgentRecall
from actormem.actors.retention import part_snapshot
from actormem.runtime import ActorContext
from actormem.runtime.state import DurableChanges
from tests.actors.memory.stored import StoredState
from tests.support import examples

ROLES = ("user", "assistant", "system")
WORDS = ("vault", "code", "bread", "river", "market", "lamp", "bridge", "owl")


@st.composite
def commands(draw: st.DrawFn) -> list[Any]:
    out: list[Any] = []
    serial = 0
    chain = 0  # the pool's delivery chain to this agent
    for _ in range(draw(st.integers(1, 25))):
        kind = draw(
            st.sampled_from(
                [
                    *("add", "add", "add", "add", "context", "delete", "prune"),
                    *("record", "retrieve", "insight", "clear", "episode", "reload", "held"),
                    *("update", "update", "summary", "search", "put", "get", "erase"),
                ]
            )
        )
        if kind == "add":
            batch = []
            for _ in range(draw(st.integers(1, 3))):
                serial += 1
                words = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=6))
                batch.append(
                    Message(
                        id=f"m{serial}",
                        role=draw(st.sampled_from(ROLES)),
                        content=" ".join(words) + f" #{serial}",
                    )
                )
            out.append(Add(messages=batch))
        elif kind == "context":
            out.append(Context(max_tokens=draw(st.integers(30, 400)), query=None))
        elif kind == "delete":
            out.append(Delete(ids=[], indices=[draw(st.integers(-3, 2))]))
        elif kind == "prune":
            out.append(Prune(max_tokens=draw(st.integers(10, 300)), preserve_system=True))
        elif kind == "record":
            serial += 1
            out.append(Record(messages=[Message(role="user", content=f"remember lamp {serial}")]))
        elif kind == "retrieve":
            out.append(Retrieve(query=draw(st.sampled_from(WORDS)), k=3))
        elif kind == "insight":
            serial += 1
            insight = Insight(
                id=f"i{serial}",
                text=f"the owl knows {serial}",
                topic="news",
                source="pat",
                importance=0.5,
                created=1_700_000_000.0 + serial,
            )
            if draw(st.booleans()):
                chain += 1
                out.append(InsightDelivery(insight=insight, number=chain, after=chain - 1))
            else:
                out.append(InsightDelivery(insight=insight))
        elif kind == "erase":
            # The pool's erased form of an insight (its source forgotten), next in the chain.
            serial += 1
            chain += 1
            target = draw(st.integers(1, serial))
            erased = Insight(
                id=f"i{target}",
                text="",
                topic="news",
                source="pat",
                importance=0.5,
                created=1_700_000_000.0 + target,
                erased=True,
            )
            out.append(InsightDelivery(insight=erased, number=chain, after=chain - 1))
        elif kind == "clear":
            out.append(Clear(history=draw(st.booleans())))
        elif kind == "episode":
            out.append(StartEpisode(metadata={}))
        elif kind == "update":
            serial += 1
            target = f"m{draw(st.integers(1, max(serial, 1)))}"
            out.append(
                Update(
                    id=target,
                    content=draw(st.sampled_from([None, f"edited {serial}"])),
                    importance=draw(st.sampled_from([None, 0.25])),
                    set_metadata=draw(st.sampled_from([{}, {"seen": serial}])),
                    remove_metadata=draw(st.sampled_from([[], ["seen"]])),
                )
            )
        elif kind == "summary":
            first = draw(st.integers(1, max(serial, 1)))
            ids = [f"m{i}" for i in range(first, first + draw(st.integers(1, 3)))]
            out.append(SetSummary(text=f"summary {serial}", replaces=ids))
        elif kind == "search":
            scope = draw(st.sampled_from(["working", "history"]))
            roles = draw(st.sampled_from([None, ["user"], ["user", "assistant"]]))
            query = draw(st.sampled_from(WORDS))
            out.append(Search(query=query, mode="ranked", k=3, scope=scope, roles=roles))
        elif kind == "put":
            serial += 1
            key = draw(st.sampled_from(WORDS))
            out.append(PutEntry(namespace=("notes",), key=key, value={"n": serial}))
        elif kind == "get":
            out.append(GetEntry(namespace=("notes",), key=draw(st.sampled_from(WORDS))))
        elif kind == "held":
            out.append(HeldInsights(query="owl", k=5))
        else:
            out.append("reload")
    return out


def _state(memory: AgentMemory) -> dict[str, Any]:
    """What must survive a reload (recall components compared by content, not time)."""
    recall = memory.recall  # made here on both sides: restored unobserved adds count
    longterm = recall.longterm.export_state()
    return {
        "working": [
            (m.id, m.content, m.metadata, m.importance, m.tokens) for m in memory._store.working
        ],
        "history": [(m.id, m.content) for m in memory._store.history],
        "stats": msgspec.structs.asdict(memory._stats()),
        "offloaded": sorted(memory._store.offloaded),
        "insights": [i.id for i in recall.inbox.export_state().insights],
        "cursors": recall.inbox.export_state().cursors,
        "longterm": sorted(e.text for e in longterm.entries),
        "keyed": [(e.key, e.value) for e in recall.keyed.export_state().entries],
        "episodes": _episodes(recall.episodes.export_state()),
        # The live memory's standing indexes against the ones a reload builds afresh.
        "ranked": [
            [m.id for m in memory._queries.search(Search(query=q, mode="ranked", scope=s, roles=r))]
            for s in ("working", "history")
            for r in (None, ["user"])
            for q in ("vault code", "river", "owl bridge lamp")
        ],
    }


def _episodes(state: Any) -> Any:
    """Episodes by what they hold (ids and start times are made afresh)."""
    current = state.current
    return (
        [(e.number, [_held(m) for m in e.messages]) for e in state.episodes],
        None if current is None else [_held(m) for m in current.messages],
        list(state.working),
        [m.id if isinstance(m, Message) else m for m in state.core],
    )


def _held(m: Message) -> Any:
    """A message as recall holds it (an edit included)."""
    return (m.id, m.content, m.metadata, m.importance)


@settings(
    max_examples=examples(150),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(script=commands())
def test_a_reload_rebuilds_the_state_the_commands_left(script: list[Any]) -> None:
    _replay_with_reloads(script)


def test_a_reload_keeps_the_edit_of_a_deleted_message_awaiting_its_reply() -> None:
    """Recall holds the edited message until the reply; the working view lost it."""
    _replay_with_reloads(
        [
            Add(messages=[Message(id="m1", role="user", content="vault #1")]),
            Update(id="m1", content="edited 2"),
            Context(max_tokens=400, query=None),
            Delete(ids=[], indices=[0]),
            Add(messages=[Message(id="m3", role="assistant", content="code #3")]),
            "reload",
            Add(messages=[Message(id="m4", role="assistant", content="owl #4")]),
        ]
    )


def _replay_with_reloads(script: list[Any]) -> None:
    """Run ``script`` through one memory, reloading it from what it stored at each
    ``"reload"`` and at the end; each reload must rebuild the state exactly."""

    async def run() -> None:
        async with MemoryRuntime() as rt:
            factory = memory_factory(rt.app_config)

            def fresh(snapshot: bytes | None, log: list[bytes]) -> AgentMemory:
                memory = factory(ActorContext(rt, "memory/durable"))
                memory.durable_restore(snapshot, log)  # as the transport does on activation
                return memory

            stored = StoredState()
            memory = fresh(None, [])
            for command in script:
                if command == "reload":
                    before = _state(memory)
                    # Making recall for the comparison is itself no change to store.
                    stored.keep(memory)
                    memory = fresh(stored.snapshot, stored.log)
                    assert _state(memory) == before
                    continue
                # Insights come from the pool; everything else from outside any actor.
                memory.ctx.sender = "pool/main" if isinstance(command, InsightDelivery) else None
                try:
                    await memory.receive(command)
                except Exception as exc:  # bad input for this state: nothing changes
                    # (ContextBudgetError among them: a budget below the smallest valid context)
                    assert isinstance(exc, MemoryInputError), exc
                stored.keep(memory)
                if memory._recall is not None:
                    _check_encoded(memory._recall)
            before = _state(memory)
            stored.keep(memory)
            assert _state(fresh(stored.snapshot, stored.log)) == before

    anyio.run(run)


def _check_encoded(recall: AgentRecall) -> None:
    """The parts' states the snapshot holds (a part is encoded again only when its
    change count moved) are the ones encoding each part afresh gives."""
    afresh = {name: part_snapshot(part) for name, part in recall._parts.items()}
    assert recall.component_states() == {k: v for k, v in afresh.items() if v is not None}


@pytest.mark.anyio
async def test_plain_adds_store_no_snapshot_and_reload_by_replay() -> None:
    async with MemoryRuntime() as rt:
        factory = memory_factory(rt.app_config)
        memory = factory(ActorContext(rt, "memory/a"))
        memory.durable_restore(None, [])
        log: list[bytes] = []
        for i in range(50):
            await memory.receive(Add(messages=[Message(role="user", content=f"hello {i}")]))
            changes = memory.durable_changes()
            assert changes.snapshot is None  # the commit carries one message, whatever the size
            log += changes.log_appends
        again = factory(ActorContext(rt, "memory/a"))
        again.durable_restore(None, log)
        assert [m.id for m in again._store.working] == [m.id for m in memory._store.working]
        assert again._stats() == memory._stats()


@pytest.mark.anyio
async def test_a_command_handed_on_to_the_pool_stores_no_snapshot() -> None:
    async with MemoryRuntime() as rt:
        memory = memory_factory(rt.app_config)(ActorContext(rt, "memory/ada"))
        memory.durable_restore(None, [])
        await memory.receive(Add(messages=[Message(role="user", content="the mill is shut")]))
        assert memory.durable_changes().snapshot is None
        await memory.receive(ToPool(command=Share(text="the mill is shut", source="ada")))
        assert memory.durable_changes() == DurableChanges([])


async def _memory_with_episodes(rt: MemoryRuntime) -> tuple[AgentMemory, StoredState]:
    """A memory after a few turns and an edit, its changes kept as the transport does."""
    memory = memory_factory(rt.app_config)(ActorContext(rt, "memory/ada"))
    memory.durable_restore(None, [])
    stored = StoredState()
    for n in range(6):
        role = ROLES[n % 2]
        await memory.receive(Add(messages=[Message(id=f"m{n}", role=role, content=f"owl {n}")]))
    await memory.receive(Update(id="m2", content="owl two"))
    await memory.receive(StartEpisode(metadata={"day": 2}))
    await memory.receive(Add(messages=[Message(id="m6", role="user", content="lamp 6")]))
    stored.keep(memory)
    return memory, stored


@pytest.mark.anyio
async def test_the_snapshot_holds_the_episodes_messages_the_log_holds_by_id() -> None:
    async with MemoryRuntime() as rt:
        memory, stored = await _memory_with_episodes(rt)
        assert stored.snapshot is not None
        state = msgspec.msgpack.decode(stored.snapshot, type=MemorySnapshot)
        assert "episodes" not in state.recall and state.episodes is not None
        episodes = msgspec.msgpack.decode(state.episodes)
        held = [m for e in [*episodes["episodes"], episodes["current"]] for m in e["messages"]]
        # The edited message whole (the log holds its original), the others by id.
        assert [m if isinstance(m, str) else m["content"] for m in held] == [
            *("m0", "m1", "owl two", "m3", "m4", "m5", "m6")
        ]
        again = memory_factory(rt.app_config)(ActorContext(rt, "memory/ada"))
        again.durable_restore(stored.snapshot, stored.log)
        assert _state(again) == _state(memory)


@pytest.mark.anyio
async def test_a_snapshot_with_the_episodes_whole_still_loads() -> None:
    async with MemoryRuntime() as rt:
        memory, stored = await _memory_with_episodes(rt)
        # As snapshots are encoded with no episodes apart: whole in the recall states.
        whole = encode_snapshot(memory._store, memory._compaction, memory._recall, None)
        assert "episodes" in msgspec.msgpack.decode(whole, type=MemorySnapshot).recall
        again = memory_factory(rt.app_config)(ActorContext(rt, "memory/ada"))
        again.durable_restore(whole, stored.log)
        assert _state(again) == _state(memory)


@pytest.mark.anyio
async def test_a_retrieval_s_touches_go_with_the_next_snapshot_not_one_of_their_own() -> None:
    async with MemoryRuntime() as rt:
        memory = memory_factory(rt.app_config)(ActorContext(rt, "memory/ada"))
        memory.durable_restore(None, [])
        stored = StoredState()
        notes = [
            Message(role="user", content=f"the owl nests by the mill, note {n}") for n in range(3)
        ]
        await memory.receive(Record(messages=notes))
        stored.keep(memory)
        assert await memory.receive(Retrieve(query="owl mill"))
        # The touch alone: a read, nothing to store.
        assert stored.keep(memory) == DurableChanges([])
        await memory.receive(Record(messages=[Message(role="user", content="the lamp is lit")]))
        assert stored.keep(memory).snapshot is not None
        again = memory_factory(rt.app_config)(ActorContext(rt, "memory/ada"))
        again.durable_restore(stored.snapshot, stored.log)
        assert again.recall.longterm._accessed == memory.recall.longterm._accessed


def _delivery(number: int, text: str = "", erasing: int | None = None) -> InsightDelivery:
    """The pool's delivery ``number`` of its chain to one agent: of insight
    ``i<number>`` with ``text``, or of the erased form of insight ``i<erasing>``."""
    n = number if erasing is None else erasing
    insight = Insight(
        id=f"i{n}",
        text=text,
        topic="news",
        source="pat",
        importance=0.5,
        created=1_700_000_000.0 + n,
        erased=erasing is not None,
    )
    return InsightDelivery(insight=insight, number=number, after=number - 1)


async def _memory_taking_insights(rt: MemoryRuntime) -> tuple[AgentMemory, StoredState]:
    """A durable memory holding one message, its recall made, its changes kept; what
    it receives next comes from the pool."""
    memory = memory_factory(rt.app_config)(ActorContext(rt, "memory/ada"))
    memory.durable_restore(None, [])
    stored = StoredState()
    await memory.receive(Add(messages=[Message(role="user", content="the mill is shut")]))
    await memory.receive(Context(max_tokens=400, query=None))  # recall is made
    stored.keep(memory)
    memory.ctx.sender = "pool/main"
    return memory, stored


def _reloaded(rt: MemoryRuntime, stored: StoredState) -> AgentMemory:
    """A memory activated from ``stored``, as the transport activates one."""
    memory = memory_factory(rt.app_config)(ActorContext(rt, "memory/ada"))
    memory.durable_restore(stored.snapshot, stored.log)
    return memory


@pytest.mark.anyio
async def test_an_insight_delivered_is_a_log_entry_and_a_reload_applies_it_again() -> None:
    async with MemoryRuntime() as rt:
        memory, stored = await _memory_taking_insights(rt)
        for n in (1, 2, 3):
            await memory.receive(_delivery(n, f"the owl knows {n}"))
            changes = stored.keep(memory)
            # One entry, whatever the inbox holds: no snapshot of it.
            assert changes.snapshot is None and len(changes.log_appends) == 1
            assert is_logged_delivery(changes.log_appends[0])
        await memory.receive(_delivery(2, "the owl knows 2"))  # sent again: skipped
        assert stored.keep(memory) == DurableChanges([])
        await memory.receive(Add(messages=[Message(role="user", content="the lamp is lit")]))
        stored.keep(memory)
        again = _reloaded(rt, stored)
        assert _state(again) == _state(memory)
        assert again.recall.inbox.export_state().cursors == {"pool/main": 3}
        assert [m.content for m in again._store.history] == ["the mill is shut", "the lamp is lit"]


@pytest.mark.anyio
async def test_deliveries_and_adds_handled_as_a_batch_are_one_change_set_that_reloads() -> None:
    # Over Redis a run of them queued for one memory is a batch (Command.batch): each
    # handled in turn, their changes taken once.
    assert InsightDelivery.batch and Add.batch
    async with MemoryRuntime() as rt:
        memory, stored = await _memory_taking_insights(rt)
        await memory.receive(_delivery(1, "the owl knows 1"))
        await memory.receive(Add(messages=[Message(role="user", content="the lamp is lit")]))
        await memory.receive(_delivery(2, "the owl knows 2"))
        await memory.receive(_delivery(2, "the owl knows 2"))  # sent again: skipped
        await memory.receive(_delivery(3, "the owl knows 3"))
        changes = stored.keep(memory)
        assert changes.snapshot is None  # log entries only
        again = _reloaded(rt, stored)
        assert _state(again) == _state(memory)
        assert again.recall.inbox.export_state().cursors == {"pool/main": 3}
        assert [i.text for i in again.recall.inbox] == [f"the owl knows {n}" for n in (1, 2, 3)]
        assert [m.content for m in again._store.history] == ["the mill is shut", "the lamp is lit"]


@pytest.mark.anyio
async def test_an_erased_insight_leaves_no_stored_entry_quoting_it() -> None:
    async with MemoryRuntime() as rt:
        memory, stored = await _memory_taking_insights(rt)
        await memory.receive(_delivery(1, "the vault code is 4417"))
        await memory.receive(_delivery(2, "the owl knows"))
        stored.keep(memory)
        assert any(b"4417" in entry for entry in stored.log)
        await memory.receive(_delivery(3, erasing=1))
        changes = stored.keep(memory)
        assert changes.replace_log and changes.snapshot
        assert stored.snapshot is not None
        assert b"4417" not in stored.snapshot + b"".join(stored.log)
        assert not any(map(is_logged_delivery, stored.log))  # the history alone
        again = _reloaded(rt, stored)
        assert _state(again) == _state(memory)
        assert [i.text for i in again.recall.inbox] == ["the owl knows"]


@pytest.mark.anyio
async def test_the_log_is_written_again_once_its_deliveries_outnumber_its_history() -> None:
    async with MemoryRuntime() as rt:
        memory, stored = await _memory_taking_insights(rt)
        rewrites = 0
        for n in range(1, 2 * DELIVERIES_KEPT + 3):
            await memory.receive(_delivery(n, f"the owl knows {n}"))
            rewrites += stored.keep(memory).replace_log
            assert len(stored.log) <= 1 + DELIVERIES_KEPT
        assert rewrites == 2
        again = _reloaded(rt, stored)
        assert _state(again) == _state(memory)
        assert again.recall.inbox.export_state().cursors == {"pool/main": 2 * DELIVERIES_KEPT + 2}
