"""Lost replies: asks whose worker is SIGKILLed between storing a command and
sending its reply.

Askers ask ledgers one command at a time while a random one of three workers is
killed with SIGKILL and started again: under its id (it takes its shards back at
once) or, every second kill, replaced under a new id (its shards wait for their
leases to expire, then go to whoever takes them first). A worker killed after its group commit
took the reply with it; the ask, sent again unchanged while no reply comes, is
answered by the shard's next owner with the reply kept with the commit. Each row
counts the asks that timed out although their command was applied (the target
is 0) and checks every agent's stored log against what was asked: an answered
ask applied exactly once, in its asker's order. An ask that timed out and was
not applied is the caller's known failure, not a loss: it is counted in the
load column.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

import anyio
import msgspec
import pytest
import redis.asyncio as aioredis

from actormem.runtime import AskTimeoutError
from actormem.runtime.redis import RedisConfig
from actormem.runtime.redis.config import DEFAULT_LEASE_MS
from actormem.runtime.redis.worker import WorkerProcesses
from tests.faults.report import Recorder, full_size
from tests.support.actors import Add
from tests.support.history import Applied, History
from tests.support.streams import client_runtime, eventually, owners, stored_tokens

pytestmark = [pytest.mark.faults, pytest.mark.anyio]

REGISTER = "tests.support.actors:register"
#: Seconds between asks of one asker (each waits for its reply first).
PAUSE = 0.02


@dataclass
class Storm:
    """What one storm of asks did and what the askers saw."""

    history: History = field(default_factory=History)
    agents: list[str] = field(default_factory=list)
    answered: int = 0
    timed_out: set[str] = field(default_factory=set)
    kills: int = 0
    replaced: int = 0
    resent: int = 0
    slowest: float = 0.0


async def ask_storm(
    config: RedisConfig, *, askers: int, kills: int, every: float, timeout: float
) -> Storm:
    """``askers`` tasks ask 4 ledgers each, one command at a time, while a random
    worker of three is SIGKILLed and started again every ``every`` s, ``kills``
    times (every second one under a new id); then the askers finish the asks they
    are waiting on."""
    storm = Storm()
    rng = random.Random(23)
    stop = anyio.Event()
    async with (
        WorkerProcesses(3, config, REGISTER, log_level="warning") as workers,
        client_runtime(config) as rt,
    ):

        async def shared() -> bool:
            return await owners(workers)() == set(workers.ids)

        await eventually(shared, "every worker owns some shards", limit=60.0)

        async def asker(n: int) -> None:
            agents = [f"ledger/a{n}-{i}" for i in range(4)]
            storm.agents += agents
            i = 0
            while not stop.is_set():
                agent, token = agents[i % len(agents)], f"a{n}-{i}"
                i += 1
                storm.history.sent(token, agent, token, producer=f"asker{n}")
                started = time.monotonic()
                try:
                    await rt.ref(agent).ask(Add(token), timeout=timeout)
                    storm.answered += 1
                except AskTimeoutError:
                    storm.timed_out.add(token)
                storm.slowest = max(storm.slowest, time.monotonic() - started)
                await anyio.sleep(PAUSE)

        async with anyio.create_task_group() as tg:
            for n in range(askers):
                tg.start_soon(asker, n)
            for _ in range(kills):
                await anyio.sleep(every)
                victim = rng.randrange(3)
                workers.kill(victim)
                storm.kills += 1
                if storm.kills % 2 == 0:
                    storm.replaced += 1
                    workers.ids[victim] = f"r{storm.kills}-{workers.ids[victim]}"[:64]
                workers.start(victim)
            await anyio.sleep(every)
            stop.set()
        storm.resent = rt.transport.stats().asks_resent  # type: ignore[attr-defined]
    return storm


@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    ("lease_ms", "every", "kills"),
    [
        # Each kill's shards come back within a lease and a heartbeat, before the next.
        pytest.param(2_000, 3.0, (3, 12), id="2s-lease"),
        # A killed worker's shards wait up to a lease for their next owner, and its
        # last replies with them.
        pytest.param(DEFAULT_LEASE_MS, 15.0, (2, 5), id="default-lease"),
    ],
)
async def test_asks_in_a_kill_storm_are_answered_or_not_applied(
    redis_client: aioredis.Redis,
    redis_config: RedisConfig,
    fault_report: Recorder,
    lease_ms: int,
    every: float,
    kills: tuple[int, int],
) -> None:
    config = msgspec.structs.replace(redis_config, shards=6, lease_ms=lease_ms)
    askers, kills_made = (24, kills[1]) if full_size() else (8, kills[0])
    storm = await ask_storm(config, askers=askers, kills=kills_made, every=every, timeout=30.0)
    await anyio.sleep(1.0)  # a late effect of a timed-out ask would land now
    stored = await stored_tokens(redis_client, config, storm.agents)
    applied = {token for tokens in stored.values() for token in tokens}
    applied_timed_out = sorted(storm.timed_out & applied)
    for token in storm.timed_out - applied:
        storm.history.forget(token)  # the asker was told it failed: not a loss
    verdict = storm.history.check({a: [Applied(t) for t in ts] for a, ts in stored.items()})
    lease = "default " if lease_ms == DEFAULT_LEASE_MS else ""
    fault_report.row(
        f"asks while a worker is SIGKILLed every {every:g} s ({lease}{lease_ms / 1000:g} s lease)",
        f"3 workers, {askers} askers, {storm.kills} kills ({storm.replaced} replaced), "
        f"{len(storm.timed_out - applied)} timed out unapplied, {storm.resent} asks resent, "
        f"slowest ask {storm.slowest:.1f} s",
        verdict,
        applied_timed_out=len(applied_timed_out),
    )
    assert storm.kills == kills_made
    assert verdict.ok, str(verdict)
    assert applied_timed_out == [], f"asks timed out although applied: {applied_timed_out[:5]}"
    assert storm.answered > 0
