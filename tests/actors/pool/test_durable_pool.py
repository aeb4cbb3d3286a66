"""The durable pool: delivery chains apply each insight once and in order, and over
Redis the pool's insights, subscriptions, applied shares and cursors survive a
restart; a restarted pool sends again what its subscribers did not get."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import msgspec
import pytest

from actormem.actors import AppConfig, MemoryRuntime
from actormem.actors.memory.commands import ToPool
from actormem.actors.pool.actor import STORED_APPLIED, PoolActor, PoolState
from actormem.actors.pool.commands import GetPoolStats, PoolStats, Share, ShareResult
from actormem.actors.pool.cursors import ACK_EVERY, Cursor, Cursors, PendingDelivery
from actormem.actors.pool.insights import Insight, make_insight
from actormem.actors.recall.inbox import InsightInbox
from actormem.runtime import ActorContext, Runtime
from actormem.runtime.redis import Keys, RedisConfig, RedisTransport, shard_of
from actormem.runtime.redis._client import connect

pytestmark = pytest.mark.anyio

POOL = "pool/main"


def _insight(n: int) -> Insight:
    return make_insight(
        f"insight number {n} about the harbour", topic="t", importance=0.5, source="a"
    )


def test_a_chain_applies_each_delivery_once_and_in_order() -> None:
    cursors, inbox = Cursors(), InsightInbox()
    sent = [cursors.next("bob", _insight(n)) for n in range(1, 5)]
    assert [(d.number, d.after) for d in sent] == [(1, 0), (2, 1), (3, 2), (4, 3)]
    assert inbox.deliver(POOL, sent[0]) == (True, 1, False)
    assert inbox.deliver(POOL, sent[0]) == (False, 1, False)  # a copy: not applied again
    # Delivery 2 is lost on the way: 3 and 4 wait; the gap is reported once.
    assert inbox.deliver(POOL, sent[2]) == (False, 1, True)
    assert inbox.deliver(POOL, sent[3]) == (False, 1, False)
    again = cursors.resend("bob", 1)
    assert [(d.number, d.after, d.ack) for d in again] == [
        (2, 1, False),
        (3, 2, False),
        (4, 3, True),
    ]
    for delivery in again + again:  # sent twice: applied once
        inbox.deliver(POOL, delivery)
    assert [i.text for i in inbox] == [f"insight number {n} about the harbour" for n in range(1, 5)]
    cursors.acked("bob", 4)
    assert cursors.pending() == 0 and list(cursors.probes()) == []


def test_a_memory_is_asked_to_confirm_every_few_deliveries_and_the_rest_stay_pending() -> None:
    cursors = Cursors()
    asks = [cursors.next("bob", _insight(n)).ack for n in range(2 * ACK_EVERY)]
    assert asks.count(True) == 2 and asks[ACK_EVERY - 1] and asks[-1]
    cursors.acked("bob", ACK_EVERY)
    assert cursors.pending() == ACK_EVERY
    [(agent, probe)] = list(cursors.probes())
    assert (agent, probe.number, probe.ack) == ("bob", 2 * ACK_EVERY, True)


def test_a_chain_the_pool_gave_up_on_goes_on_from_where_the_memory_stands() -> None:
    cursors, inbox = Cursors(max_pending=2), InsightInbox()
    for n in range(1, 5):
        cursors.next("bob", _insight(n))
    assert cursors.given_up == 2  # 1 and 2 were never confirmed; only 3 and 4 are kept
    again = cursors.resend("bob", 0)
    assert [(d.number, d.after) for d in again] == [(3, 0), (4, 3)]
    for delivery in again:
        inbox.deliver(POOL, delivery)
    assert len(inbox) == 2


async def test_the_pool_survives_a_restart_over_redis(
    make_redis_transport: Callable[[], RedisTransport],
) -> None:
    share = Share(text="the bridge closes at nine", source="alice", topic="news")
    near = Share(text="The bridge closes at nine!", source="carol", topic="news")
    async with MemoryRuntime(AppConfig(), transport=make_redis_transport()) as rt:
        bob = rt.memory("bob")
        await bob.subscribe("news")
        first = await _as_agent(rt, share)
        await rt.memory("carol").share("the market opens at six", "news")
        dup = await _as_agent(rt, near)
        assert (first.status, first.recipients, dup.status) == ("new", 1, "duplicate")
    async with MemoryRuntime(AppConfig(), transport=make_redis_transport()) as rt:
        stats = await rt.ask(POOL, GetPoolStats())
        assert (stats.insights, stats.agents) == (2, 1)
        # The shares' ids are remembered: sent again, each gets its first answer.
        assert await _as_agent(rt, share) == first
        assert await _as_agent(rt, near) == dup
        repeat = await rt.memory("alice").share("the bridge closes at nine", "news")
        assert repeat.status == "duplicate" and repeat.insight.id == first.insight.id
        await rt.memory("dave").share("the ferry is late today", "news")  # bob still subscribed
        held = await rt.memory("bob").held_insights(k=10)
        assert sorted(i.text for i in held) == [
            "the bridge closes at nine",
            "the ferry is late today",
            "the market opens at six",
        ]


async def _as_agent(rt: MemoryRuntime, share: Share) -> ShareResult:
    """Send ``share`` as its source (through its memory), with its own id."""
    value = await rt.ask(f"memory/{share.source}", ToPool(command=share))
    return msgspec.convert(value, ShareResult)


async def test_a_restarted_pool_sends_again_what_a_subscriber_did_not_get(
    make_redis_transport: Callable[[], RedisTransport], redis_config: RedisConfig
) -> None:
    # The pool stored two deliveries to bob that never left its worker (killed
    # between its commit and its outbox): pending in its stored state, unknown to bob.
    insights = [_insight(1), _insight(2)]
    pending = [
        PendingDelivery(number=1, after=0, insight=insights[0]),
        PendingDelivery(number=2, after=1, insight=insights[1]),
    ]
    state = PoolState(
        insights=insights,
        cursors=[Cursor(agent="bob", last=2, pending=pending)],
        delivery_number=2,
    )
    client = connect(redis_config)
    try:
        key = Keys(redis_config.prefix).actor_snapshot(shard_of(POOL, redis_config.shards), POOL)
        await client.set(key, msgspec.msgpack.encode(state))
    finally:
        await client.aclose()
    async with MemoryRuntime(AppConfig(), transport=make_redis_transport()) as rt:
        await rt.ask(POOL, GetPoolStats())  # activates it: it asks bob how far he got
        bob = rt.memory("bob")
        with anyio.fail_after(10):
            while True:
                stats: PoolStats = await rt.ask(POOL, GetPoolStats())
                if stats.pending_deliveries == 0:
                    break
                await anyio.sleep(0.02)
        held = await bob.held_insights(k=10)
        assert sorted(i.id for i in held) == sorted(i.id for i in insights)  # each once


async def test_the_stored_applied_shares_are_the_newest_and_compact() -> None:
    pool = PoolActor(ActorContext(Runtime(), POOL))
    pool.ctx.sender = "memory/a"  # as the pool sees a share alice's memory sent
    answers = []
    for n in range(STORED_APPLIED + 5):
        text = f"w{n} x{n} y{n} z{n}"
        answers.append(await pool.receive(Share(text=text, source="a", topic=f"t{n % 10}")))
    answers.append(await pool.receive(Share(text="w7 x7 y7 z7", source="a", topic="t7")))
    state = pool.export_state()
    assert len(state.applied) == STORED_APPLIED
    # A new share's answer names the held insight of its own id: stored without it.
    assert [a.insight is not None for a in state.applied].count(True) == 1  # the duplicate
    again = PoolActor(ActorContext(Runtime(), POOL))
    again.durable_restore(msgspec.msgpack.encode(state), [])
    assert list(again._applied.values()) == answers[-STORED_APPLIED:]
