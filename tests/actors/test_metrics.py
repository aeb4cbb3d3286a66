"""The domain's metrics on an embedded MemoryRuntime with ``[metrics] port``: agents
active, compressions and the tokens they saved, pool deliveries, commands by type."""

from __future__ import annotations

import pytest

from actormem.actors import AppConfig, MemoryRuntime
from actormem.actors.compression import CompressionConfig
from actormem.runtime.config import MetricsConfig
from actormem.runtime.redis import RedisConfig, free_port
from actormem.runtime.redis.transport import RedisTransport
from actormem.runtime.redis.worker import WorkerProcesses
from tests.actors.compression._build import chatter
from tests.support.scrape import Samples, parse, scrape, value
from tests.support.streams import eventually

pytestmark = pytest.mark.anyio


async def test_an_embedded_runtime_serves_the_domain_counts() -> None:
    port = free_port()
    config = AppConfig(
        metrics=MetricsConfig(port=port), compression=CompressionConfig(msg_threshold=6)
    )
    async with MemoryRuntime(config) as rt:
        alice, bob = rt.memory("alice"), rt.memory("bob")
        await bob.subscribe("ferry")
        await alice.share("The ferry leaves at noon.", topic="ferry")
        for i in range(10):
            role = "user" if i % 2 == 0 else "assistant"
            await alice.add({"role": role, "content": f"round {i}: " + chatter(8)})
        seen: list[Samples] = []

        async def counted() -> bool:
            seen[:] = [parse((await scrape(port))[2])]
            return value(seen[0], "actormem_compressions_total") >= 1 and bool(
                value(seen[0], "actormem_pool_deliveries_total")
            )

        await eventually(counted, "a compression and a delivery are counted", limit=20)
    samples = seen[0]
    assert value(samples, "actormem_compression_tokens_saved_total") > 0
    assert value(samples, "actormem_pool_deliveries_total") == 1
    assert value(samples, "actormem_actors_active", kind="memory") == 2
    assert value(samples, "actormem_actors_active", kind="pool") == 1
    assert value(samples, "actormem_commands_handled_total", command="Add") >= 10
    assert value(samples, "actormem_commands_handled_total", command="CompressRequest") >= 1


def test_each_worker_process_gets_a_port_of_its_own() -> None:
    metrics = MetricsConfig(port=9100, status_interval=5.0)
    redis = RedisConfig(url="redis://127.0.0.1:1")
    workers = WorkerProcesses(
        3, redis, "actormem.actors.app.wiring:worker_register", metrics=metrics
    )
    assert [workers.metrics_of(i).port for i in range(3)] == [9100, 9101, 9102]
    assert workers.metrics_of(2).status_interval == 5.0
    off = WorkerProcesses(2, redis, "actormem.actors.app.wiring:worker_register")
    assert [off.metrics_of(i).port for i in range(2)] == [0, 0]


def test_a_client_of_workers_leaves_the_port_to_them() -> None:
    config = AppConfig(metrics=MetricsConfig(port=9100))
    client = RedisTransport("redis://127.0.0.1:1", RedisConfig(), worker=False)
    assert MemoryRuntime(config, transport=client).metrics is None
    assert MemoryRuntime(config).metrics is not None
