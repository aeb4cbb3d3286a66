"""Compression faults: a worker SIGKILLed while its agents' compressions are in flight.

Worker processes serve the memories and the compressors; the summarizer is the
loopback OpenAI stub with a delay, so every compression takes seconds. The worker
that owns the most memories with a compression in flight is killed and started
again; the agents go on talking. Every agent must end within budget, with its
history intact (the history checker), a view an LLM accepts, each original message
held once (no summary or offload block applied twice), and its compressions
resumed by the restarted worker rather than lost.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator

import msgspec
import pytest
import redis.asyncio as aioredis

from actormem.actors import AppConfig, MemoryRuntime, Message, check_openai_messages
from actormem.actors.app.wiring import worker_env
from actormem.actors.compression import CompressionConfig, LLMConfig
from actormem.actors.compression._layout import sendable
from actormem.actors.compression.offload import reload_ids
from actormem.actors.memory.commands import MemoryExport
from actormem.runtime.redis import RedisConfig, shard_of
from actormem.runtime.redis.transport import RedisTransport
from actormem.runtime.redis.worker import WorkerProcesses
from tests.faults.report import Recorder, full_size
from tests.support.history import History, observe_stored_memory
from tests.support.openai_server import OpenAIStub, serve_keyed
from tests.support.streams import eventually, lease_holders, owners

pytestmark = [pytest.mark.faults, pytest.mark.anyio]

KEY_ENV = "ACTORMEM_FAULTS_COMPRESSION_KEY"
REGISTER = "actormem.actors.app.wiring:worker_register"
#: Seconds every LLM answer takes.
DELAY = 0.8


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAIStub]:
    yield from serve_keyed(monkeypatch, KEY_ENV)


def app(stub: OpenAIStub, redis: RedisConfig) -> AppConfig:
    llm = LLMConfig(
        base_url=stub.base_url,
        api_key_env=KEY_ENV,
        model="stub",
        timeout=20.0,
        max_retries=0,
        breaker_failures=1_000,
    )
    compression = CompressionConfig(
        msg_threshold=20,
        max_tokens=1200,
        last_keep=6,
        summarizer="openai",
        llm=llm,
        timeout=30.0,
        concurrency=4,
    )
    return AppConfig(redis=redis, compression=compression)


def turn(agent: str, i: int) -> list[Message]:
    return [
        Message(role="user", name="bob", content=f"{agent} question {i}: how is the mill today?"),
        Message(role="assistant", content=f"{agent} answer {i}: the wheel turned {i} times."),
    ]


def held_once(export: MemoryExport) -> Counter[str]:
    """How often each original message is held: in the view, or behind reload ids
    (recursively). A result applied twice holds some twice."""
    originals = {m.id for m in export.history}
    seen: set[str] = set()
    counts: Counter[str] = Counter()
    pending = list(export.working)
    while pending:
        m = pending.pop()
        if m.id in originals and not m.metadata.get("compressed"):
            counts[m.id] += 1
        ids = reload_ids(m.text())
        for key in ("reload_id", "offloaded"):
            if isinstance(m.metadata.get(key), str):
                ids.append(m.metadata[key])
        for r in ids:
            if r not in seen and r in export.offloaded:
                seen.add(r)
                pending.extend(export.offloaded[r])
    return counts


def events(workers: WorkerProcesses, name: str) -> int:
    """How often the workers logged ``name`` (their JSON log files)."""
    total = 0
    for i in range(workers.count):
        path = workers.log_path(i)
        for line in path.read_text(errors="replace").splitlines() if path.exists() else ():
            try:
                total += json.loads(line).get("event") == name
            except json.JSONDecodeError:
                continue
    return total


@pytest.mark.timeout(300)
async def test_a_worker_killed_mid_compression_resumes_it_and_applies_it_once(
    stub: OpenAIStub,
    redis_client: aioredis.Redis,
    redis_config: RedisConfig,
    fault_report: Recorder,
) -> None:
    stub.delay = DELAY
    agents = [f"a{i}" for i in range(8 if full_size() else 4)]
    turns_before, turns_after = 11, 10
    config = msgspec.structs.replace(redis_config, shards=4)
    settings = app(stub, config)
    history = History()
    async with WorkerProcesses(
        2, config, REGISTER, log_level="info", env=worker_env(settings)
    ) as workers:

        async def shared() -> bool:
            return await owners(workers)() == set(workers.ids)

        await eventually(shared, "both workers own shards")
        transport = RedisTransport(None, config, worker=False)
        async with MemoryRuntime(settings, transport=transport) as rt:
            for agent in agents:
                mem = rt.memory(agent)
                await mem.add(
                    history.message(agent, Message(role="system", content=f"You are {agent}."))
                )
                for i in range(turns_before):
                    await mem.add([history.message(agent, m) for m in turn(agent, i)])
            compressing = [a for a in agents if (await rt.memory(a).stats()).compressing]
            holders = await lease_holders(config)
            on = Counter(holders[shard_of(f"memory/{a}", config.shards)] for a in compressing)
            assert on, "no compression in flight to interrupt"
            victim_id, in_flight = on.most_common(1)[0]
            victim = workers.ids.index(victim_id)
            workers.kill(victim)
            killed = time.monotonic()
            workers.start(victim)
            await workers.wait_ready([victim])

            for i in range(turns_before, turns_before + turns_after):
                for agent in agents:
                    mem = rt.memory(agent)
                    await mem.add([history.message(agent, m) for m in turn(agent, i)])

            async def settled() -> bool:
                for agent in agents:
                    stats = await rt.memory(agent).stats()
                    if stats.compressing or settings.compression.over_budget(
                        stats.size, stats.working_tokens
                    ):
                        return False
                return True

            await eventually(settled, "every agent within budget, no compression in flight", 180)
            recovery = time.monotonic() - killed
            exports = {a: await rt.memory(a).export() for a in agents}
            compressions = {a: (await rt.memory(a).stats()).compressions for a in agents}

        resumed = events(workers, "compression_resumed")
        stored = await observe_stored_memory(redis_client, config.prefix, config.shards, agents)
        verdict = history.check(stored)
        fault_report.row(
            "worker SIGKILLed while compressions are in flight, restarted",
            f"{len(agents)} agents, {in_flight} compressions in flight on the killed worker "
            f"({resumed} resumed)",
            verdict,
            recovery_s=recovery,
        )
        assert verdict.ok, str(verdict)
        # (A round whose starting command was not stored yet starts afresh instead.)
        assert resumed >= 1, "no compression was resumed"
        for agent, export in exports.items():
            view = export.working
            assert check_openai_messages([m.to_openai() for m in sendable(view)]) == []
            held = held_once(export)
            assert {i: n for i, n in held.items() if n > 1} == {}, agent
            assert set(held) == {m.id for m in export.history}, agent
            assert compressions[agent] >= 1
            assert any("LLM SUMMARY" in m.text() for m in view)
