"""Expiry outlives the worker that served the agent: ``retention.ttl`` forgets an idle
agent everywhere even when that worker was SIGKILLed before the agent was due.

A worker process serves Ana, who holds a canary in every place an agent's text
lives (messages, tool arguments, metadata, long-term memory, episodes, offloaded
blocks, a dead letter, an insight she shared that another agent holds); it is
SIGKILLed right after, well before her TTL. Another worker takes its shards; when
Ana is due (her due time is stored with her state), it forgets her, which erases
her stream entries, dead letters and what she shared, not only her keys. Other
agents talk all along (so none of them expires): the history checker compares
what they were sent with what they hold, and every key under the run's prefix is
scanned for the canary.
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import msgspec
import pytest

from actormem.actors import MemoryRuntime, Message
from actormem.actors.app.wiring import worker_env
from actormem.runtime.redis import RedisConfig, connect
from actormem.runtime.redis.transport import RedisTransport
from actormem.runtime.redis.worker import WorkerProcesses
from tests.faults.report import Recorder, full_size
from tests.support import erasure
from tests.support.history import History, observe_memory
from tests.support.redis import keys_holding

pytestmark = [pytest.mark.faults, pytest.mark.anyio]

REGISTER = "actormem.actors.app.wiring:worker_register"
CANARY = erasure.CANARY.encode()
#: retention.ttl of the run (s): long enough to plant the canary through a worker
#: process, short enough to wait for.
TTL = 3.0


async def test_an_agent_whose_worker_died_is_forgotten_everywhere_when_due(
    redis_config: RedisConfig, tmp_path: Path, fault_report: Recorder
) -> None:
    agents = [f"b{i}" for i in range(8 if full_size() else 3)]
    # Short leases: the second worker takes the dead one's shards within a second.
    redis = msgspec.structs.replace(redis_config, shards=4, lease_ms=1000, no_owner_timeout=30)
    base = erasure.erasure_config(tmp_path)
    retention = msgspec.structs.replace(base.retention, ttl=TTL)
    config = msgspec.structs.replace(base, retention=retention, redis=redis)
    history = History()
    client = connect(redis)

    def client_runtime() -> MemoryRuntime:
        return MemoryRuntime(config, transport=RedisTransport(None, redis, worker=False))

    stop, stopped = anyio.Event(), anyio.Event()
    talking = len(agents)

    async def talk(rt: MemoryRuntime, agent: str) -> None:
        nonlocal talking
        n = 0
        while not stop.is_set():
            message = Message(id=f"{agent}-{n}", role="user", content=f"{agent} says {n}")
            await rt.memory(agent).add(history.message(agent, message, producer=agent))
            n += 1
            await anyio.sleep(0.1)
        talking -= 1
        if not talking:
            stopped.set()

    try:
        async with (
            WorkerProcesses(1, redis, REGISTER, env=worker_env(config)) as workers,
            client_runtime() as rt,
            anyio.create_task_group() as tg,
        ):
            for agent in agents:
                tg.start_soon(talk, rt, agent)
            ana, bob = rt.memory("ana"), rt.memory("bob")
            await bob.subscribe("vault")
            await erasure.plant(ana)
            await ana.share(f"the vault code is {erasure.CANARY}", topic="vault")
            await erasure.dead_letter(client, redis, "ana")
            killed = time.monotonic()
            workers.kill(0)  # before Ana is due: its sweeper dies with it
            # The next worker knows nothing of Ana until her due time comes.
            async with MemoryRuntime(config, transport=RedisTransport(redis.url, redis)):
                held = [redis.prefix]
                with anyio.move_on_after(10 * TTL):
                    while held := await keys_holding(client, redis.prefix, CANARY):  # noqa: ASYNC110
                        await anyio.sleep(0.1)
                assert held == [], f"the canary is still in {held}"
                erased_after = time.monotonic() - killed
                stop.set()
                with anyio.fail_after(30):
                    await stopped.wait()
                verdict = history.check(await observe_memory(rt, agents))
                stats = await ana.stats()  # a new command finds her empty
                assert (stats.history_size, stats.longterm_entries) == (0, 0)
        fault_report.row(
            "worker SIGKILLed before an idle agent with a canary in every place was due; "
            "its successor forgets it at its stored due time",
            f"{len(agents)} agents talking, TTL {TTL:g} s; canary scan of every key",
            verdict,
            recovery_s=erased_after,
        )
        assert verdict.ok, str(verdict)
        assert erasure.files_holding(tmp_path, erasure.CANARY) == []
    finally:
        await client.aclose()
