"""Pool faults: the insight pool's workers killed (SIGKILL) or restarted (SIGTERM)
while agents share and subscribe.

Every insight the pool acknowledged (a share whose reply came back) is recorded in
a :class:`History` once per subscriber, with its sharer as the producer; after
the run, each subscriber's held insights are read straight from Redis (its
memory's stored snapshot and the deliveries logged after it, in the order they
were applied) and the checker says
whether any was lost, applied twice, or applied out of its sharer's order.
"""

from __future__ import annotations

import random
import time

import anyio
import msgspec
import pytest
import redis.asyncio as aioredis

from actormem.actors import AppConfig, MemoryRuntime
from actormem.actors.memory.commands import ToPool
from actormem.actors.memory.snapshot import LoggedDelivery, decode_snapshot, is_logged_delivery
from actormem.actors.pool.commands import (
    POOL_ADDRESS,
    GetPoolStats,
    PoolStats,
    Share,
    ShareResult,
)
from actormem.actors.recall.inbox import InboxState, InsightInbox
from actormem.runtime import AskTimeoutError, RuntimeConfig
from actormem.runtime.redis import Keys, RedisConfig, RedisTransport, shard_of
from actormem.runtime.redis.worker import WorkerProcesses
from tests.faults.report import Recorder, full_size
from tests.support.history import Applied, History, digest
from tests.support.streams import eventually, lease_holders, owners

pytestmark = [pytest.mark.faults, pytest.mark.anyio]

REGISTER = "actormem.actors.app.wiring:worker_register"
SUBSCRIBERS = [f"sub{i}" for i in range(6)]
SHARERS = [f"sharer{i}" for i in range(4)]
#: Seconds a client waits for one reply before it asks again with the same share id.
ASK_AGAIN_AFTER = 5.0
#: Seconds the deliveries may take to settle after the run, at most.
DELIVERY_BOUND = 120.0


def insight_text(rng: random.Random, sharer: str, n: int) -> str:
    """A text no other insight nearly duplicates (random words, a unique tag)."""
    picked = " ".join(f"w{rng.randrange(100_000)}" for _ in range(8))
    return f"{sharer} report {n}: {picked}"


async def held_in_order(
    client: aioredis.Redis, config: RedisConfig, agents: list[str]
) -> dict[str, list[Applied]]:
    """Each agent's held insights as its memory's stored state keeps them (in the
    order they were applied): the inbox of its snapshot, then the deliveries its log
    holds after the snapshot's mark, applied again as a reload does; read straight
    from Redis, one call per subscriber."""
    keys = Keys(config.prefix)
    out: dict[str, list[Applied]] = {}
    for agent in agents:
        address = f"memory/{agent}"
        shard = shard_of(address, config.shards)
        async with client.pipeline(transaction=False) as pipe:
            pipe.get(keys.actor_snapshot(shard, address))
            pipe.lrange(keys.actor_log(shard, address), 0, -1)
            raw, log = await pipe.execute()
        snapshot = decode_snapshot(raw)
        stored = snapshot.recall.get("insights")
        inbox = InsightInbox()
        inbox.load_state(
            msgspec.msgpack.decode(stored, type=InboxState) if stored else InboxState()
        )
        mark = len(log) if snapshot.log_mark < 0 else snapshot.log_mark
        for entry in log[mark:]:
            if is_logged_delivery(entry):
                logged = msgspec.msgpack.decode(entry, type=LoggedDelivery)
                inbox.deliver(logged.pool, logged.delivery)
        out[agent] = [Applied(f"{i.id}@{agent}", digest(i.text)) for i in inbox]
    return out


class Timeouts:
    """Shares whose ask timed out: all of them, and those the pool had applied (the
    answer to the share sent again, with the same id, names an insight made before
    it was sent)."""

    def __init__(self) -> None:
        self.all = 0
        self.applied = 0


async def share_until_acknowledged(
    rt: MemoryRuntime, sharer: str, text: str, timeouts: Timeouts
) -> str:
    """Share ``text`` as ``sharer`` until the pool answers, asking again with the same
    share id (so the pool applies it once); the insight's id."""
    share = Share(text=text, source=sharer, topic="news")
    timed_out = False
    while True:
        sent_at = time.time()
        try:
            result = await rt.ask(f"memory/{sharer}", ToPool(command=share), ASK_AGAIN_AFTER)
        except AskTimeoutError:
            timed_out = True
            timeouts.all += 1
            continue
        insight = msgspec.convert(result, ShareResult).insight
        assert insight.id == share.id
        if timed_out and insight.created < sent_at:
            timeouts.applied += 1
        return share.id


async def pool_answers(rt: MemoryRuntime) -> bool:
    """True when the pool answers (so it is active: a restarted pool has asked its
    subscribers how far they got)."""
    try:
        await rt.ask(POOL_ADDRESS, GetPoolStats(), ASK_AGAIN_AFTER)
    except AskTimeoutError:
        return False
    return True


def client(config: RedisConfig) -> MemoryRuntime:
    transport = RedisTransport(None, config, worker=False)
    return MemoryRuntime(
        AppConfig(redis=config, runtime=RuntimeConfig(ask_timeout=30.0)), transport=transport
    )


async def run_sharers(
    rt: MemoryRuntime,
    history: History,
    per_sharer: int,
    rng: random.Random,
    timeouts: Timeouts,
    pause: float = 0.0,
) -> None:
    """Every sharer shares ``per_sharer`` insights, one after another (``pause`` s
    apart), recording each acknowledged one for every subscriber."""

    async def sharer(name: str) -> None:
        for n in range(per_sharer):
            await anyio.sleep(pause)
            text = insight_text(rng, name, n)
            insight = await share_until_acknowledged(rt, name, text, timeouts)
            for agent in SUBSCRIBERS:
                history.sent(f"{insight}@{agent}", agent, text, producer=name)

    async with anyio.create_task_group() as tg:
        for name in SHARERS:
            tg.start_soon(sharer, name)


async def check_delivered(
    rt: MemoryRuntime, redis_client: aioredis.Redis, config: RedisConfig, history: History
) -> dict[str, list[Applied]]:
    """Wait (a bound, not a timing assertion) until every subscriber holds what it was
    sent, then read what they hold: the checker names anything still missing."""
    with anyio.move_on_after(DELIVERY_BOUND):
        while True:
            if await pool_answers(rt):
                held = await held_in_order(redis_client, config, SUBSCRIBERS)
                if sum(len(v) for v in held.values()) >= len(history):
                    break
            await anyio.sleep(0.1)
    await anyio.sleep(1.0)  # a late copy would land now
    return await held_in_order(redis_client, config, SUBSCRIBERS)


@pytest.mark.timeout(900)
async def test_a_kill_storm_while_agents_share_loses_and_repeats_no_insight(
    redis_client: aioredis.Redis, redis_config: RedisConfig, fault_report: Recorder
) -> None:
    # Every 1.5 s a worker is SIGKILLed and started again at once: every other kill
    # hits the pool's own worker. Meanwhile 4 agents share, paced (each waits for
    # the pool's answer, asking again with the same share id after a timeout), to 6
    # subscribers: 480 insights in full (within what a memory holds), 200 small.
    per_sharer = 120 if full_size() else 50
    config = msgspec.structs.replace(redis_config, shards=6)
    history = History()
    rng = random.Random(17)
    timeouts = Timeouts()
    kills = 0
    async with WorkerProcesses(3, config, REGISTER, log_level="info") as workers:

        async def shared() -> bool:
            return await owners(workers)() == set(workers.ids)

        await eventually(shared, "every worker owns some shards")
        async with client(config) as rt:
            for agent in SUBSCRIBERS:
                await rt.memory(agent).subscribe("news")

            async def storm(done: anyio.Event) -> None:
                nonlocal kills
                while not done.is_set():
                    with anyio.move_on_after(1.5):
                        await done.wait()
                    if done.is_set():
                        break
                    victim = rng.randrange(3)
                    if kills % 2 == 0:  # the pool's worker, when one holds its shard
                        holder = (await lease_holders(config)).get(
                            shard_of(POOL_ADDRESS, config.shards)
                        )
                        if holder in workers.ids:
                            victim = workers.ids.index(holder)
                    workers.kill(victim)
                    kills += 1
                    workers.start(victim)

            done = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(storm, done)
                await run_sharers(rt, history, per_sharer, rng, timeouts, pause=0.1)
                done.set()
            held = await check_delivered(rt, redis_client, config, history)
        logs = "".join(workers.log_path(i).read_text() for i in range(3))
    verdict = history.check(held)
    probed, resent = logs.count("pool_deliveries_probed"), logs.count("insight_deliveries_resent")
    fault_report.row(
        "pool's and agents' workers SIGKILLed every 1.5 s while agents share",
        f"3 workers, 4 sharers, 6 subscribers, {kills} kills, "
        f"{probed} pool restarts probing subscribers, {resent} resends, "
        f"{timeouts.all} shares timed out",
        verdict,
        applied_timed_out=timeouts.applied,
    )
    assert kills >= 2, "the storm killed workers mid-run"
    assert verdict.ok, str(verdict)
    assert timeouts.applied == 0, f"{timeouts.applied} shares timed out although applied"


async def test_the_pool_s_worker_restarted_gracefully_keeps_broadcasting(
    redis_client: aioredis.Redis, redis_config: RedisConfig, fault_report: Recorder
) -> None:
    # A deploy: the only worker is stopped with SIGTERM and started again, twice.
    # The pool's insights and subscriptions are still there, and broadcast goes on.
    history = History()
    rng = random.Random(3)
    timeouts = Timeouts()
    async with WorkerProcesses(1, redis_config, REGISTER, log_level="warning") as workers:
        await eventually(owners(workers), "the worker owns the shards")
        async with client(redis_config) as rt:
            for agent in SUBSCRIBERS:
                await rt.memory(agent).subscribe("news")
            for _ in range(3):
                await run_sharers(rt, history, 5, rng, timeouts)
                await workers.stop(0)
                workers.start(0)
                # Started again: its shards are unowned until it takes them (a
                # worker slow to start on a busy machine fails asks meanwhile).
                await eventually(owners(workers), "the restarted worker owns the shards")
            stats: PoolStats = await rt.ask(POOL_ADDRESS, GetPoolStats())
            held = await check_delivered(rt, redis_client, redis_config, history)
    verdict = history.check(held)
    fault_report.row(
        "pool's worker restarted with SIGTERM (a deploy), 3 times",
        f"1 worker, 4 sharers, 6 subscribers, {timeouts.all} shares timed out",
        verdict,
        applied_timed_out=timeouts.applied,
    )
    assert (stats.insights, stats.agents) == (len(history) // len(SUBSCRIBERS), 6)
    assert verdict.ok, str(verdict)
    assert timeouts.applied == 0, f"{timeouts.applied} shares timed out although applied"
