"""Process faults: workers killed and restarted, slow handlers, stale owners,
actors that keep crashing, crashes while a snapshot is written, Redis restarts.

Every test records what it sent in a :class:`History`, reads what each agent
ended with straight from Redis, and reports the checker's verdict as one row of
the fault report (``make faults`` prints the table). Sizes: ``make faults`` runs
the sizes the reliability issue names (``ACTORMEM_FAULTS=full``: 100,000 commands
in the kill storm), ``make test`` a smaller run of the same tests.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from pathlib import Path

import anyio
import msgspec
import pytest
import redis.asyncio as aioredis

from actormem.runtime import ActorStoppedError, HandlerError, Runtime, SupervisionConfig
from actormem.runtime.redis import (
    EmbeddedRedis,
    Keys,
    RedisConfig,
    connect,
    default_codec,
    free_port,
    shard_of,
)
from actormem.runtime.redis.worker import WorkerProcesses
from tests.faults.report import Recorder, full_size
from tests.runtime.redis.test_transport import worker
from tests.support.actors import Add, Boom, Flaky, GetState, Ledger
from tests.support.history import Applied, History, Verdict
from tests.support.streams import client_runtime, eventually, lease_holders, owners, stored_tokens

pytestmark = [pytest.mark.faults, pytest.mark.anyio]

REGISTER = "tests.support.actors:register"


def verdict_of(history: History, stored: dict[str, list[str]]) -> Verdict:
    """The checker's verdict on ledgers' stored logs (tokens are the command ids)."""
    return history.check({a: [Applied(t) for t in tokens] for a, tokens in stored.items()})


async def applied_count(client: aioredis.Redis, config: RedisConfig, agents: list[str]) -> int:
    keys = Keys(config.prefix)
    async with client.pipeline(transaction=False) as pipe:
        for a in agents:
            pipe.llen(keys.actor_log(shard_of(a, config.shards), a))
        return sum(await pipe.execute())


async def send(
    rt: Runtime, history: History, agents: list[str], count: int, *, prefix: str = "c"
) -> None:
    """Tell ``count`` Adds round-robin over ``agents``, recording each."""
    for i in range(count):
        agent, token = agents[i % len(agents)], f"{prefix}{i}"
        history.sent(token, agent, token)
        await rt.ref(agent).tell(Add(token))


async def send_paced(
    rt: Runtime,
    history: History,
    agents: list[str],
    count: int,
    rate: float,
    *,
    prefix: str,
    sent: Counter[str] | None = None,
) -> None:
    """Tell ``count`` Adds round-robin over ``agents`` at ``rate`` a second, recording
    each (and counting them per agent in ``sent``), then flush the outbox."""
    started = time.monotonic()
    for i in range(count):
        agent, token = agents[i % len(agents)], f"{prefix}{i}"
        history.sent(token, agent, token)
        if sent is not None:
            sent[agent] += 1
        await rt.ref(agent).tell(Add(token))
        if i % 100 == 99:
            ahead = (i + 1) / rate - (time.monotonic() - started)
            if ahead > 0:
                await anyio.sleep(ahead)
    await rt.transport.flush()  # type: ignore[attr-defined]


async def all_applied(
    client: aioredis.Redis, config: RedisConfig, agents: list[str], count: int
) -> None:
    """Wait until ``count`` commands are applied to ``agents``."""

    async def applied() -> bool:
        return await applied_count(client, config, agents) >= count

    await eventually(applied, "every command applied", limit=600.0)


# -- the kill storm ------------------------------------------------------------------


class ShardProgress:
    """Commands applied per shard, sampled: how long a killed worker's shards stall."""

    def __init__(self, config: RedisConfig, agents: list[str], total: int) -> None:
        self.config = config
        self.by_shard: dict[int, list[str]] = {}
        for a in agents:
            self.by_shard.setdefault(shard_of(a, config.shards), []).append(a)
        #: Commands each shard applies by the end (sent round-robin over ``agents``).
        self.expected = Counter(
            shard_of(agents[i % len(agents)], config.shards) for i in range(total)
        )

    async def counts(self, client: aioredis.Redis) -> dict[int, int]:
        keys = Keys(self.config.prefix)
        async with client.pipeline(transaction=False) as pipe:
            for shard, agents in self.by_shard.items():
                for a in agents:
                    pipe.llen(keys.actor_log(shard, a))
            lengths = iter(await pipe.execute())
        by_shard = self.by_shard.items()
        return {shard: sum(next(lengths) for _ in agents) for shard, agents in by_shard}


@pytest.mark.timeout(900)
async def test_a_kill_storm_across_three_workers_loses_and_repeats_nothing(
    redis_client: aioredis.Redis, redis_config: RedisConfig, fault_report: Recorder
) -> None:
    # A random worker is killed with SIGKILL every 2 s and started again at once,
    # while a producer sends commands to 60 agents over 6 shards.
    # Paced, so the storm lasts: 40 s (about 20 kills) in full, 8 s in the small run.
    total, rate = (100_000, 2_500.0) if full_size() else (8_000, 1_000.0)
    config = msgspec.structs.replace(redis_config, shards=6)
    agents = [f"ledger/k{i}" for i in range(60)]
    per_shard = {shard_of(a, config.shards): a for a in agents}
    history = History()
    rng = random.Random(7)
    progress = ShardProgress(config, agents, total)
    recoveries: list[float] = []
    kills = 0
    async with (
        WorkerProcesses(3, config, REGISTER, log_level="warning") as workers,
        client_runtime(config) as rt,
    ):

        async def shared() -> bool:
            return await owners(workers)() == set(workers.ids)

        await eventually(shared, "every worker owns some shards")
        assert len(per_shard) == config.shards

        async def recovery(victim: str, killed_at: float, before: dict[int, int]) -> None:
            # The victim's shards, each until it applies a command again (or is done).
            held = {s for s, w in (await lease_holders(config)).items() if w == victim}
            waiting = {s for s in held if before[s] < progress.expected[s]}
            while waiting:
                await anyio.sleep(0.05)
                now = await progress.counts(redis_client)
                waiting = {s for s in waiting if now[s] == before[s]}
            recoveries.append(time.monotonic() - killed_at)

        async def storm(done: anyio.Event) -> None:
            nonlocal kills
            async with anyio.create_task_group() as tg:
                while not done.is_set():
                    with anyio.move_on_after(2.0):
                        await done.wait()
                    if done.is_set():
                        break
                    i = rng.randrange(3)
                    before = await progress.counts(redis_client)
                    killed_at = time.monotonic()
                    workers.kill(i)
                    kills += 1
                    tg.start_soon(recovery, workers.ids[i], killed_at, before)
                    workers.start(i)

        done = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(storm, done)
            await send_paced(rt, history, agents, total, rate, prefix="k")
            await all_applied(redis_client, config, agents, total)
            done.set()
        await anyio.sleep(1.0)  # a late duplicate would land now
        stored = await stored_tokens(redis_client, config, agents)
    verdict = verdict_of(history, stored)
    fault_report.row(
        "worker SIGKILLed every 2 s and restarted",
        f"3 workers, 60 agents, {rate:,.0f} commands/s, {kills} kills",
        verdict,
        recovery_s=max(recoveries, default=None),
    )
    assert kills >= 2, "the storm killed workers mid-run"
    assert verdict.ok, str(verdict)


# -- a handler slower than the claim idle time -------------------------------------------


async def test_a_handler_slower_than_the_claim_idle_time_keeps_its_message(
    redis_client: aioredis.Redis, redis_config: RedisConfig, fault_report: Recorder
) -> None:
    # claim_idle_ms is 400: the slow command stays pending for 3 s, with later
    # commands for its agent waiting behind it, on two workers sharing the shards.
    config = msgspec.structs.replace(redis_config, shards=2)
    assert config.claim_idle_ms < 1_000
    agents = [f"ledger/slow{i}" for i in range(6)]
    history = History()
    async with (
        worker(redis_client, config) as one,
        worker(redis_client, config) as two,
        client_runtime(config) as rt,
    ):

        async def shared() -> bool:
            holders = set((await lease_holders(config)).values())
            return len(holders) == 2

        await eventually(shared, "both workers own a shard")
        for n, agent in enumerate(agents):
            token = f"slow{n}"
            history.sent(token, agent, token)
            await rt.ref(agent).tell(Add(token, delay=3.0))
        await send(rt, history, agents, 120, prefix="after")
        await rt.transport.flush()  # type: ignore[attr-defined]

        async def applied() -> bool:
            return await applied_count(redis_client, config, agents) >= len(history)

        await eventually(applied, "every command applied")
        await anyio.sleep(1.0)
        stored = await stored_tokens(redis_client, config, agents)
        stats = [w.transport.stats() for w in (one, two)]  # type: ignore[attr-defined]
    verdict = verdict_of(history, stored)
    fault_report.row(
        "handler runs 3 s, claim idle time 0.4 s",
        "2 workers, 6 agents",
        verdict,
    )
    assert verdict.ok, str(verdict)
    # Nothing was claimed away from its owner, delivered again or dead-lettered.
    assert [(s.redelivered, s.dead_lettered) for s in stats] == [(0, 0), (0, 0)]
    assert await redis_client.xlen(Keys(config.prefix).dead_letters()) == 0


# -- a stale owner ---------------------------------------------------------------------------


async def test_a_paused_stale_owner_cannot_overwrite_the_new_owner_s_state(
    redis_client: aioredis.Redis, redis_config: RedisConfig, fault_report: Recorder
) -> None:
    config = msgspec.structs.replace(redis_config, shards=2)
    agents = [f"ledger/stale{i}" for i in range(12)]
    history = History()
    async with WorkerProcesses(2, config, REGISTER) as workers, client_runtime(config) as rt:

        async def shared() -> bool:
            return await owners(workers)() == set(workers.ids)

        await eventually(shared, "both workers own shards")
        for i in range(120):  # slow commands, so the pause lands mid-command
            agent, token = agents[i % len(agents)], f"s{i}"
            history.sent(token, agent, token)
            await rt.ref(agent).tell(Add(token, delay=0.02))

        async def busy() -> bool:
            return await applied_count(redis_client, config, agents) >= 20

        await eventually(busy, "the workers are busy")
        workers.signal(0, signal.SIGSTOP)  # paused mid-command, holding its leases
        paused_at = time.monotonic()

        async def taken_over() -> bool:
            return await owners(workers)() == {workers.ids[1]}

        await eventually(taken_over, "the other worker takes the shards over")
        took = time.monotonic() - paused_at
        workers.signal(0, signal.SIGCONT)  # it wakes up believing it still owns them

        async def done() -> bool:
            return await applied_count(redis_client, config, agents) >= len(history)

        try:
            await eventually(done, "every command applied")
        except AssertionError as exc:
            # What the workers said is what tells a stall from a lost command.
            tails = "\n".join(_tail(workers.log_path(i)) for i in range(2))
            raise AssertionError(f"{exc}\n{tails}") from None
        await anyio.sleep(1.0)  # give a stale write every chance to land
        stored = await stored_tokens(redis_client, config, agents)
    verdict = verdict_of(history, stored)
    fault_report.row(
        "owner paused past its lease (SIGSTOP)", "2 workers, 12 agents", verdict, recovery_s=took
    )
    assert verdict.ok, str(verdict)
    log = workers.log_path(0).read_text()
    assert "write_fenced_off" in log or "shard_lease_lost" in log


# -- repeated crashes ------------------------------------------------------------------------


async def test_repeated_crashes_restart_within_the_intensity_then_stop_with_nothing_acked_lost(
    redis_client: aioredis.Redis, redis_config: RedisConfig, fault_report: Recorder
) -> None:
    # Every agent's handler fails now and then (after changing the ledger in
    # memory): each failure restarts it from what Redis holds, within a budget of
    # 8 restarts a minute. One agent then keeps crashing past the budget: it
    # stops, the commands it can no longer take are refused and dead-lettered,
    # and a new worker rebuilds it from Redis with every acknowledged command.
    supervision = SupervisionConfig(max_restarts=8, within_seconds=60.0)
    agents = [f"crashy/c{i}" for i in range(10)]
    history = History()
    flaky = 0
    async with worker(redis_client, redis_config) as rt:
        rt.register("crashy", Ledger, supervision=supervision)
        for n in range(300):  # every seventh command fails once: 4 or 5 per agent
            agent, token = agents[n % len(agents)], f"r{n}"
            history.sent(token, agent, token)
            flaky += n % 7 == 0
            await rt.ref(agent).tell(Flaky(token) if n % 7 == 0 else Add(token))
        victim = rt.ref(agents[0])
        booms = 0
        with pytest.raises(ActorStoppedError, match="more than 8 restarts within 60s"):
            for _ in range(10):  # past the budget: the actor stops
                with pytest.raises(HandlerError, match="boom"):
                    await victim.ask(Boom())
                booms += 1
        refused = 0
        for n in range(5):  # the stopped actor refuses; the askers are told
            with pytest.raises(ActorStoppedError, match="restarts within 60s"):
                await victim.ask(Add(f"late{n}"))
            refused += 1
        stats = rt.stats()
    letters = await redis_client.xrange(Keys(redis_config.prefix).dead_letters())
    async with worker(redis_client, redis_config) as rt:  # the actor's next home
        rt.register("crashy", Ledger, supervision=supervision)
        final = {a: [Applied(t) for t in (await rt.ref(a).ask(GetState())).tokens] for a in agents}
    verdict = history.check(final)
    fault_report.row(
        "handler crashes within the restart intensity, then past it",
        f"10 agents, {stats.restarts} restarts from Redis state, 1 actor stopped",
        verdict,
    )
    assert verdict.ok, str(verdict)
    assert stats.stopped == 1
    # Every failure but the one that stopped the actor restarted it (a failed
    # command is retried at once while the budget lasts: a Boom may fail twice).
    assert stats.failures == stats.restarts + 1
    assert stats.restarts >= flaky + booms
    # Dead-lettered: each Boom (the last refused as the actor had stopped), and
    # the adds it refused; nothing else, however loaded the machine (an ask its
    # actor started is answered by that handling, never by a copy handled again).
    bodies = [default_codec.decode_envelope(f[b"e"]).body for _, f in letters]
    assert bodies.count(Boom()) == booms + 1
    refused_adds = sorted(b.token for b in bodies if isinstance(b, Add))
    assert refused_adds == [f"late{n}" for n in range(refused)]
    assert len(bodies) == booms + 1 + refused


# -- a crash while writing a snapshot ----------------------------------------------------------


async def test_a_worker_killed_while_writing_snapshots_leaves_the_previous_one_valid(
    redis_client: aioredis.Redis, redis_config: RedisConfig, fault_report: Recorder
) -> None:
    # HeavyLedger writes a 1 MB checksummed snapshot with every command: a
    # SIGKILL at a random moment mostly lands while one is on its way to Redis.
    # A snapshot that did not commit must leave the last one that did intact
    # (the actor refuses to load one whose checksum fails), consistent with the log.
    kills = 8 if full_size() else 3
    config = msgspec.structs.replace(redis_config, shards=2)
    agents = [f"heavy/h{i}" for i in range(4)]
    history = History()
    rng = random.Random(11)
    n = interrupted = 0
    async with (
        WorkerProcesses(1, config, REGISTER, log_level="warning") as workers,
        client_runtime(config) as rt,
    ):
        for _ in range(kills):
            before = await applied_count(redis_client, config, agents)
            for _ in range(100):
                agent, token = agents[n % len(agents)], f"h{n}"
                n += 1
                history.sent(token, agent, token)
                await rt.ref(agent).tell(Add(token))
            await rt.transport.flush()  # type: ignore[attr-defined]

            async def writing(before: int = before) -> bool:
                return await applied_count(redis_client, config, agents) > before

            await eventually(writing, "snapshots being written")
            await anyio.sleep(rng.uniform(0.0, 0.03))
            workers.kill(0)
            # Work was cut short: some of the round's commands were not stored yet.
            interrupted += await applied_count(redis_client, config, agents) < n
            workers.start(0)
        started = time.monotonic()
        states = {a: await rt.ref(a).ask(GetState()) for a in agents}
        recovered = time.monotonic() - started

        async def all_stored() -> bool:
            # A read's reply does not wait for the commits of the writes before it.
            return await applied_count(redis_client, config, agents) >= n

        await eventually(all_stored, "every command stored")
        stored = await stored_tokens(redis_client, config, agents)
    verdict = verdict_of(history, stored)
    fault_report.row(
        "worker SIGKILLed while writing 1 MB snapshots",
        f"1 worker, 4 agents, {kills} kills ({interrupted} mid-work)",
        verdict,
        recovery_s=recovered,
    )
    assert verdict.ok, str(verdict)
    assert interrupted > 0, "a kill landed while commands were being stored"
    for agent, state in states.items():
        # Loaded without a checksum error, and the snapshot agrees with the log.
        assert state.tokens == stored[agent]
        assert state.total == len(stored[agent])


# -- Redis restarts ----------------------------------------------------------------------------


async def test_redis_killed_and_restarted_with_aof_loses_no_acknowledged_command(
    tmp_path: Path, redis_config: RedisConfig, fault_report: Recorder
) -> None:
    # A private Redis with appendfsync everysec, killed with SIGKILL mid-run: what
    # it acknowledged more than a second before is on disk. The producers keep
    # sending while it is down (their outboxes wait), and everything arrives once.
    port = free_port()
    config = msgspec.structs.replace(
        redis_config, url=f"redis://127.0.0.1:{port}", shards=2, retry_for=30.0, socket_timeout=1.0
    )
    agents = [f"ledger/r{i}" for i in range(12)]
    history = History()
    server = EmbeddedRedis(aof=True, port=port, directory=tmp_path)
    await server.start()
    try:
        async with (
            WorkerProcesses(1, config, REGISTER, log_level="warning"),
            client_runtime(config) as rt,
        ):
            await send(rt, history, agents, 600, prefix="before")
            await rt.transport.flush()  # type: ignore[attr-defined]
            client = connect(config)
            try:

                async def midway() -> bool:
                    return await applied_count(client, config, agents) >= 100

                await eventually(midway, "the worker is part-way through")
            finally:
                await client.aclose()
            # SIGKILL mid-run: no shutdown save, only what the AOF holds. A reply
            # means the write reached the AOF file (fsync is what everysec delays,
            # and only an OS crash loses what is written but not yet synced).
            assert server.pid is not None
            os.kill(server.pid, signal.SIGKILL)
            await server.aclose()
            await send(rt, history, agents, 120, prefix="during")  # queued meanwhile
            server = EmbeddedRedis(aof=True, port=port, directory=tmp_path)
            await server.start()
            back = time.monotonic()
            client = connect(config)
            try:

                async def all_done() -> bool:
                    return await applied_count(client, config, agents) >= len(history)

                await eventually(all_done, "commands sent while Redis was down are applied")
                recovered = time.monotonic() - back
                await anyio.sleep(1.0)
                stored = await stored_tokens(client, config, agents)
            finally:
                await client.aclose()
    finally:
        await server.aclose()
    verdict = verdict_of(history, stored)
    fault_report.row(
        "Redis SIGKILLed and restarted (AOF everysec)",
        "1 worker, 12 agents, 120 commands sent while down",
        verdict,
        recovery_s=recovered,
    )
    assert verdict.ok, str(verdict)


def _tail(path: Path, lines: int = 60) -> str:
    """The last ``lines`` lines a worker logged, headed by its log's name."""
    text = path.read_text(errors="replace").splitlines() if path.exists() else []
    return "\n".join([f"--- {path.name}", *text[-lines:]])
