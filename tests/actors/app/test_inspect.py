"""``actormem inspect`` against one running two-worker deployment, shared by the tests
of this module: the workers' counters, the agents, one agent's memory, the pool;
each worker's metrics endpoint; and the failures a client sums over its workers."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
import redis.asyncio as aioredis

from actormem.actors import AppConfig, MemoryRuntime
from actormem.actors.app.simulation.run import _actor_failures
from actormem.actors.app.wiring import CONFIG_ENV
from actormem.actors.pool.commands import POOL_ADDRESS
from actormem.runtime.config import MetricsConfig, RuntimeConfig
from actormem.runtime.redis import Keys, RedisConfig, connect, free_port, shard_of
from actormem.runtime.redis._counters import read_workers_total
from actormem.runtime.redis.transport import RedisTransport
from actormem.runtime.redis.worker import WorkerProcesses
from tests.actors.app.test_ops import cli, write_config
from tests.support.actors import Boom
from tests.support.redis import short_config
from tests.support.scrape import parse, scrape, value
from tests.support.streams import eventually, every_worker_owns_shards

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

REGISTER = "tests.support.actors:register_app_and_ledger"
#: Alice's conversation after her system message: user and assistant turns.
TURNS = 6


@dataclass(frozen=True)
class Deployment:
    config: RedisConfig
    path: str
    workers: WorkerProcesses
    metrics_port: int


@asynccontextmanager
async def client(config: RedisConfig) -> AsyncIterator[MemoryRuntime]:
    app = AppConfig(redis=config, runtime=RuntimeConfig(ask_timeout=30.0))
    async with MemoryRuntime(app, transport=RedisTransport(config.url, config, worker=False)) as rt:
        yield rt


async def traffic(config: RedisConfig) -> None:
    """Alice talks, records, opens an episode and shares; Bob and Carol subscribe; a
    ledger's handler crashes on ``Boom`` until its command is dead-lettered."""
    async with client(config) as rt:
        alice, bob, carol = rt.memory("alice"), rt.memory("bob"), rt.memory("carol")
        await bob.subscribe("*")
        await carol.subscribe("market")
        await alice.add({"role": "system", "content": "You are Alice, the baker."})
        await alice.start_episode(day=1)
        for i in range(TURNS // 2):
            await alice.add({"role": "user", "name": "bob", "content": f"how many loaves? {i}"})
            await alice.add({"role": "assistant", "content": f"{40 + i} loaves today"})
        await alice.record({"role": "user", "name": "bob", "content": "the key is under the pot"})
        await alice.share("The market opens at 7.", topic="market", importance=0.8)
        await carol.add({"role": "user", "content": "hello"})
        await rt.tell("ledger/brittle", Boom())


@pytest.fixture(scope="module")
def deployment(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    config = short_config(redis_url, f"t{secrets.token_hex(6)}")
    path = write_config(tmp_path_factory.mktemp("inspect") / "deployment.toml", config)
    port = free_port()
    workers = WorkerProcesses(
        2,
        config,
        REGISTER,
        env={CONFIG_ENV: path},
        log_level="warning",
        metrics=MetricsConfig(port=port, status_interval=0),
    )

    async def start() -> None:
        await workers.__aenter__()
        await every_worker_owns_shards(workers)
        await traffic(config)

    try:
        anyio.run(start)
        yield Deployment(config, path, workers, port)
    finally:
        anyio.run(workers.aclose)


async def inspect(deployment: Deployment, *args: str) -> Any:
    ran = await cli("inspect", deployment.path, *args, "--json")
    assert ran.code == 0, ran.err
    return json.loads(ran.out)


async def test_inspect_shows_each_worker_s_counters(deployment: Deployment) -> None:
    seen: dict[str, Any] = {}

    async def crashed() -> bool:
        seen.update(await inspect(deployment))
        counters = [w["counters"] for w in seen["workers"]]
        return all(counters) and sum(c["dead_letters"] for c in counters) == 1

    # The ledger's handler crashes at every delivery until the command is dead-lettered.
    try:
        await eventually(crashed, "a worker dead-letters the crashing command")
    except AssertionError as exc:
        counters = {w["worker"]: w["counters"] for w in seen.get("workers", [])}
        raise AssertionError(f"{exc}: workers' counters {counters}") from None
    workers = {w["worker"]: w["counters"] for w in seen["workers"]}
    assert set(workers) == set(deployment.workers.ids)
    assert sum(c["handled"] for c in workers.values()) >= TURNS + 5
    assert sum(c["failures"] for c in workers.values()) == deployment.config.max_deliveries
    assert sum(c["restarts"] for c in workers.values()) >= 1
    assert sum(c["active_by_kind"].get("memory", 0) for c in workers.values()) == 3
    assert seen["dead_letters"] == 1
    table = await cli("inspect", deployment.path)
    assert table.code == 0, table.err
    assert "actor failures" in table.out and table.out.endswith("dead letters: 1\n")

    # A client sums them: what `simulate --workers` reports.
    async with client(deployment.config) as rt:
        assert isinstance(rt.transport, RedisTransport)
        summed = await read_workers_total(rt.transport)
        reported = await _actor_failures(rt, workers=2)
    assert summed.failures == deployment.config.max_deliveries
    assert reported == (summed.failures, summed.restarts)
    assert summed.handled >= sum(c["handled"] for c in workers.values())


async def test_inspect_agents_counts_them_and_lists_the_largest(deployment: Deployment) -> None:
    found = await inspect(deployment, "--agents")
    assert (found["agents"], found["active"], found["passivated"]) == (3, 3, 0)
    assert found["workers_counted"] == 2
    largest = found["largest"]
    assert [row["agent"] for row in largest] == ["alice", "carol", "bob"]  # by messages
    assert largest[0]["history_messages"] == TURNS + 1
    assert largest[0]["history_tokens"] > 0
    assert [
        row["agent"] for row in (await inspect(deployment, "--agents", "--top", "1"))["largest"]
    ] == ["alice"]
    table = await cli("inspect", deployment.path, "--agents")
    assert "agents: 3 stored, 3 active in 2 live workers, 0 passivated" in table.out


async def test_inspect_agent_reads_a_memory_as_its_worker_serves_it(
    deployment: Deployment,
) -> None:
    config = deployment.config
    keys = Keys(config.prefix)
    shard = shard_of("memory/alice", config.shards)
    stored = [
        keys.actor_log(shard, "memory/alice"),
        keys.actor_snapshot(shard, "memory/alice"),
        keys.actor_applied(shard, "memory/alice"),
    ]
    redis: aioredis.Redis = connect(config)
    try:
        before = [await redis.dump(k) for k in stored]
        found = await inspect(deployment, "--agent", "alice", "--recent", "2")
        table = await cli("inspect", deployment.path, "--agent", "alice")
        after = [await redis.dump(k) for k in stored]
    finally:
        await redis.aclose()
    assert before == after  # nothing written back
    async with client(config) as rt:
        alice = rt.memory("alice")
        assert found["stats"] == msgspec.to_builtins(await alice.stats())
        assert found["context"] == await alice.context()
        assert found["recent"] == json.loads(msgspec.json.encode(await alice.get(recent_n=2)))
    assert [m["content"] for m in found["recent"]] == ["how many loaves? 2", "42 loaves today"]
    assert "the key is under the pot" in [e["text"] for e in found["longterm"]]
    assert [(e["number"], e["metadata"]) for e in found["episodes"]][-1] == (2, {"day": 1})
    assert table.code == 0, table.err
    for title in ("memory of alice", "context as it would be sent", "long-term", "episodes"):
        assert title in table.out, title


async def test_inspect_pool_shows_topics_subscribers_and_cursors(deployment: Deployment) -> None:
    found = await inspect(deployment, "--pool")
    assert found["topics"] == [{"topic": "market", "insights": 1}]
    assert found["recent_insights"][0]["source"] == "alice"
    subscribers = {s["agent"]: s for s in found["subscribers"]}
    assert subscribers["bob"]["all_topics"] is True
    assert subscribers["carol"]["topics"] == ["market"]
    assert {c["agent"] for c in found["cursors"]} == {"bob", "carol"}
    assert all(c["last"] >= 1 for c in found["cursors"])
    table = await cli("inspect", deployment.path, "--pool")
    assert table.code == 0 and "delivery cursors" in table.out, table.err


async def test_inspect_of_an_unknown_agent_is_one_line(deployment: Deployment) -> None:
    ran = await cli("inspect", deployment.path, "--agent", "nobody")
    assert (ran.code, ran.out) == (1, "")
    assert ran.err.splitlines() == [
        f"actormem: no agent 'nobody': nothing is stored for memory/nobody under the prefix "
        f"'{deployment.config.prefix}' (see 'actormem inspect --agents')"
    ]


async def test_each_worker_serves_metrics_that_agree_with_its_counters(
    deployment: Deployment,
) -> None:
    ports = [deployment.metrics_port + i for i in range(2)]
    scraped = [parse((await scrape(port))[2]) for port in ports]
    adds = sum(value(s, "actormem_commands_handled_total", command="Add") for s in scraped)
    assert adds >= TURNS + 2
    assert sum(value(s, "actormem_owned_shards") for s in scraped) == deployment.config.shards
    crashes = sum(value(s, "actormem_handler_failures_total") for s in scraped)
    assert crashes == deployment.config.max_deliveries
    assert sum(value(s, "actormem_dead_letters_total") for s in scraped) == 1


async def test_a_stored_state_that_cannot_be_read_is_one_line(
    redis_client: aioredis.Redis, redis_config: RedisConfig, tmp_path: Path
) -> None:
    path = write_config(tmp_path / "deployment.toml", redis_config)
    keys = Keys(redis_config.prefix)
    for address in ("memory/broken", POOL_ADDRESS):
        shard = shard_of(address, redis_config.shards)
        await redis_client.set(keys.actor_snapshot(shard, address), b"\xc1 not msgpack")
    broken = await cli("inspect", path, "--agent", "broken")
    assert (broken.code, broken.out) == (1, "")
    assert broken.err.startswith("actormem: the stored state of memory/broken cannot be read: ")
    assert len(broken.err.splitlines()) == 1
    pool = await cli("inspect", path, "--pool")
    assert pool.code == 1 and len(pool.err.splitlines()) == 1, pool.err
    # Listed with what Redis holds of it; its sizes are unknown.
    [row] = json.loads((await cli("inspect", path, "--agents", "--json")).out)["largest"]
    assert (row["agent"], row["snapshot_bytes"]) == ("broken", len(b"\xc1 not msgpack"))
    assert "history_tokens" not in row
    misplaced = await cli("inspect", path, "--top", "3")
    assert (misplaced.code, misplaced.err) == (2, "actormem: error: --top goes with --agents\n")
