"""Erasure under traffic: forgetting one agent (or wiping its history) while others
talk takes nothing from anybody else, and leaves no trace of what it erased.

Ana holds a canary in every place an agent's text lives (messages, tool
arguments, metadata, long-term memory, episodes, offloaded blocks, a dead letter);
she is erased while other agents add messages through a client, and she gets
messages of her own after the erasure; then the worker is replaced. The history
checker compares what was sent with what every agent ended with (Ana's messages
from before the erasure are expected gone), and every key under the run's prefix
is scanned for the canary.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from actormem.actors import AppConfig, MemoryHandle, MemoryRuntime, Message
from actormem.runtime.redis import RedisConfig, connect
from actormem.runtime.redis.transport import RedisTransport
from tests.faults.report import Recorder, full_size
from tests.support import erasure
from tests.support.history import History, observe_memory

pytestmark = [pytest.mark.faults, pytest.mark.anyio]


@pytest.mark.parametrize("how", ["forget", "clear"])
async def test_erasing_an_agent_amid_traffic_leaves_others_whole_and_no_trace(
    how: str, redis_config: RedisConfig, tmp_path: Path, fault_report: Recorder
) -> None:
    agents = [f"b{i}" for i in range(20 if full_size() else 6)]
    per_agent = 40 if full_size() else 10
    config: AppConfig = erasure.erasure_config(tmp_path)
    history = History()
    client = connect(redis_config)

    def worker() -> MemoryRuntime:
        return MemoryRuntime(config, transport=RedisTransport(redis_config.url, redis_config))

    def client_runtime() -> MemoryRuntime:
        transport = RedisTransport(redis_config.url, redis_config, worker=False)
        return MemoryRuntime(config, transport=transport)

    async def talk(rt: MemoryRuntime, agent: str, start: int, count: int) -> None:
        for n in range(start, start + count):
            message = Message(id=f"{agent}-{n}", role="user", content=f"{agent} says {n}")
            await rt.memory(agent).add(history.message(agent, message, producer=agent))

    async def erase(ana: MemoryHandle) -> None:
        if how == "forget":
            assert await ana.forget() > 0
        else:
            assert await ana.clear(history=True) > 0

    try:
        async with worker(), client_runtime() as rt:
            ana = rt.memory("ana")
            await erasure.plant(ana)
            await erasure.dead_letter(client, redis_config, "ana")
            async with anyio.create_task_group() as tg:
                for agent in agents:
                    tg.start_soon(talk, rt, agent, 0, per_agent)
                await erase(ana)
                tg.start_soon(talk, rt, "ana", 0, per_agent)
        # A new worker loads every agent from what was stored.
        async with worker(), client_runtime() as rt:
            for agent in agents:
                await talk(rt, agent, per_agent, 2)
            verdict = history.check(await observe_memory(rt, [*agents, "ana"]))
            await erasure.no_trace_left(client, redis_config)
        fault_report.row(
            f"{how} an agent with a canary in every place, amid traffic; worker replaced",
            f"{len(agents)} agents x {per_agent + 2} adds; canary scan of every key",
            verdict,
            applied_timed_out=0,  # every ask was answered (one that timed out fails the test)
        )
        assert verdict.ok, str(verdict)
        assert verdict.applied == len(agents) * (per_agent + 2) + per_agent
        assert erasure.files_holding(tmp_path, erasure.CANARY) == []
    finally:
        await client.aclose()
