"""The pool's journal: a pool restored from its stored snapshot and journal entries
has the state of the pool that stored them, whatever its commands were; a share
stores what it changed, not the whole pool; a snapshot replaces the log when due,
and forgetting a source rewrites it."""

from __future__ import annotations

import contextlib
import random
from typing import Any

import msgspec
import pytest

from actormem.actors.pool import journal
from actormem.actors.pool.actor import PoolActor, PoolState
from actormem.actors.pool.commands import (
    DeliveryAck,
    ForgetSource,
    RegisterFact,
    Share,
    Subscribe,
    Unsubscribe,
)
from actormem.actors.pool.config import PoolConfig
from actormem.actors.pool.insights import InsightError
from actormem.runtime import ActorContext, Runtime
from actormem.runtime.state import DurableChanges

pytestmark = pytest.mark.anyio

POOL = "pool/main"
AGENTS = ("ana", "bob", "cy", "dee", "eli")
TOPICS = ("news", "food", "facts", "weather")
WORDS = ("bridge", "ferry", "market", "bread", "storm", "owl", "lamp", "mill", "harbour")


class _Store:
    """What the Redis transport keeps of a durable actor: a snapshot and a log."""

    def __init__(self) -> None:
        self.snapshot: bytes | None = None
        self.log: list[bytes] = []

    def keep(self, changes: DurableChanges) -> None:
        self.log = (
            list(changes.log_appends) if changes.replace_log else [*self.log, *changes.log_appends]
        )
        if changes.snapshot is not None:
            self.snapshot = changes.snapshot

    def restored(self, config: PoolConfig) -> PoolActor:
        pool = _pool(config)
        pool.durable_restore(self.snapshot, list(self.log))
        return pool


def _pool(config: PoolConfig) -> PoolActor:
    return PoolActor(ActorContext(Runtime(), POOL), config)


def _state(pool: PoolActor) -> Any:
    """The pool's state, in an order that does not depend on how it was rebuilt."""
    state: PoolState = pool.export_state()
    return msgspec.to_builtins(
        msgspec.structs.replace(
            state,
            insights=sorted(state.insights, key=lambda i: i.id),
            subscriptions=sorted(state.subscriptions, key=lambda s: s.agent),
            cursors=sorted(state.cursors, key=lambda c: c.agent),
        )
    )


def _command(rng: random.Random, pool: PoolActor) -> tuple[str, Any]:
    """A random command and the agent whose memory sends it."""
    agent = rng.choice(AGENTS)
    roll = rng.random()
    if roll < 0.5:
        text = " ".join(rng.sample(WORDS, 3))
        if rng.random() < 0.1:
            return agent, RegisterFact(text=text, source=agent)
        return agent, Share(
            text=text, source=agent, topic=rng.choice(TOPICS), importance=rng.random()
        )
    if roll < 0.65:
        topics = ("*",) if rng.random() < 0.3 else tuple(rng.sample(TOPICS, 2))
        return agent, Subscribe(agent=agent, topics=topics, backfill=rng.randrange(3))
    if roll < 0.75:
        return agent, Unsubscribe(agent=agent, topics=(rng.choice(TOPICS),))
    if roll < 0.97:
        last = next((c.last for c in pool._cursors.export() if c.agent == agent), 0)
        return agent, DeliveryAck(through=rng.randrange(last + 1), resend=rng.random() < 0.3)
    return agent, ForgetSource(source=agent)


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_a_restored_pool_has_the_state_of_the_pool_that_stored_it(seed: int) -> None:
    rng = random.Random(seed)
    config = PoolConfig(per_topic_limit=4, applied_ids_window=50)
    store = _Store()
    live = store.restored(config)  # as the transport activates it: nothing stored yet
    for n in range(400):
        agent, command = _command(rng, live)
        live.ctx.sender = f"memory/{agent}"
        with contextlib.suppress(InsightError):  # refused: nothing changed
            await live.receive(command)
        store.keep(live.durable_changes())
        if n % 50 == 49:
            again = store.restored(config)
            assert _state(again) == _state(live)
            assert again._cursors.number == live._cursors.number
    assert _state(store.restored(config)) == _state(live)


async def test_a_share_stores_an_entry_not_the_whole_pool() -> None:
    config = PoolConfig()
    store = _Store()
    pool = store.restored(config)
    agents = [f"agent{n}" for n in range(300)]
    for agent in agents:
        pool.ctx.sender = f"memory/{agent}"
        await pool.receive(Subscribe(agent=agent))
        store.keep(pool.durable_changes())
    pool.ctx.sender = "memory/agent0"
    sizes = []
    for n in range(12):
        await pool.receive(Share(text=f"the {WORDS[n % 9]} story number {n}", source="agent0"))
        changes = pool.durable_changes()
        store.keep(changes)
        assert changes.snapshot is None and len(changes.log_appends) == 1
        sizes.append(len(changes.log_appends[0]))
    # Each entry holds the insight and its recipients' names, whatever is pending.
    assert max(sizes) < 2 * min(sizes)
    whole = len(msgspec.msgpack.encode(pool.export_state()))
    assert whole > 10 * max(sizes)
    assert _state(store.restored(config)) == _state(pool)


async def test_a_snapshot_replaces_the_log_when_the_entries_outgrow_it(monkeypatch: Any) -> None:
    monkeypatch.setattr(journal, "MAX_ENTRIES", 5)
    config = PoolConfig()
    store = _Store()
    pool = store.restored(config)
    pool.ctx.sender = "memory/ana"
    logs = []
    for n in range(12):
        await pool.receive(Subscribe(agent="ana", topics=(f"t{n}",)))
        changes = pool.durable_changes()
        store.keep(changes)
        logs.append(len(store.log))
    assert logs == [1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5, 0]
    assert _state(store.restored(config)) == _state(pool)


async def test_forgetting_a_source_rewrites_the_log_without_its_text() -> None:
    config = PoolConfig()
    store = _Store()
    pool = store.restored(config)
    pool.ctx.sender = "memory/bob"
    await pool.receive(Subscribe(agent="bob"))
    store.keep(pool.durable_changes())
    pool.ctx.sender = "memory/ana"
    await pool.receive(Share(text="the secret is zq7canary", source="ana"))
    store.keep(pool.durable_changes())
    assert any(b"zq7canary" in entry for entry in store.log)
    await pool.receive(ForgetSource(source="ana"))
    changes = pool.durable_changes()
    store.keep(changes)
    assert changes.replace_log and changes.trim_streams
    assert store.snapshot is not None and b"zq7canary" not in store.snapshot
    assert not any(b"zq7canary" in entry for entry in store.log)
    assert _state(store.restored(config)) == _state(pool)


async def test_a_pool_no_store_restored_keeps_no_journal() -> None:
    pool = _pool(PoolConfig())
    pool.ctx.sender = "memory/ana"
    await pool.receive(Share(text="the ferry is late", source="ana"))
    assert pool._journal is None
    changes = pool.durable_changes()  # the whole state, as a store that never restored it
    assert changes.snapshot is not None and changes.log_appends == []
