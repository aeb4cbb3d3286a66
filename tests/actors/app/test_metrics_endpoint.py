"""A live worker process's metrics endpoint and status line, as an operator sees
them: scraped over HTTP before and after commands, and read in the worker's log;
a metrics port already in use stops ``actormem worker`` with one line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from anyio import run_process

from actormem.actors.app.wiring import CONFIG_ENV
from actormem.runtime.config import MetricsConfig
from actormem.runtime.redis import RedisConfig, free_port
from actormem.runtime.redis.worker import WorkerProcesses
from tests.actors.app.test_ops import APP, app_client, write_config
from tests.support import ROOT
from tests.support.scrape import Samples, parse, scrape, taken_port, value
from tests.support.streams import eventually, every_worker_owns_shards

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def status_lines(log: Path) -> list[dict[str, object]]:
    events = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    return [e for e in events if e.get("event") == "worker_status"]


async def test_a_worker_serves_metrics_that_move_and_logs_its_status(
    tmp_path: Path, redis_config: RedisConfig
) -> None:
    config_file = write_config(tmp_path / "deployment.toml", redis_config)
    port = free_port()
    metrics = MetricsConfig(port=port, status_interval=0.2)
    async with (
        WorkerProcesses(1, redis_config, APP, env={CONFIG_ENV: config_file}, metrics=metrics) as w,
        app_client(redis_config) as rt,
    ):
        await every_worker_owns_shards(w)
        before = parse((await scrape(port))[2])
        for agent in ("alice", "bob"):
            await rt.memory(agent).add({"role": "user", "content": f"hello from {agent}"})
        await rt.memory("alice").add({"role": "assistant", "content": "hello back"})
        assert len(await rt.memory("alice").get()) == 2
        after: list[Samples] = []

        async def moved() -> bool:
            after[:] = [parse((await scrape(port))[2])]
            return value(after[0], "actormem_commands_handled_total", command="Add") >= 3

        await eventually(moved, "the worker counts the commands", limit=20)

        async def logged() -> bool:
            return any(e["handled"] for e in status_lines(w.log_path(0)))

        await eventually(logged, "the worker logs a status line with handled commands", limit=20)
    samples = after[0]
    assert value(before, "actormem_commands_handled_total", command="Add") == 0
    assert value(samples, "actormem_commands_handled_total", command="Get") >= 1
    assert value(samples, "actormem_group_commit_size_count") >= 1
    assert value(samples, "actormem_group_commit_size_sum") >= 3
    assert value(samples, "actormem_group_commit_seconds_count") >= 1
    assert value(samples, "actormem_lease_acquisitions_total") >= 1
    assert value(samples, "actormem_owned_shards") == redis_config.shards
    assert ("actormem_tells_handed_over_total", frozenset()) in samples
    assert value(samples, "actormem_actors_active", kind="memory") == 2
    assert value(samples, "actormem_handling_seconds_count", kind="memory") >= 4
    line = next(e for e in status_lines(w.log_path(0)) if e["handled"])
    assert {"handled_per_s", "lag", "pending", "active_actors", "failures", "shards"} <= set(line)
    assert line["shards"] == redis_config.shards and line["failures"] == 0


def in_use(port: int) -> str:
    return (
        f"actormem: error: metrics port {port} on 127.0.0.1 is already in use "
        "(choose another with [metrics] port or --metrics-port)"
    )


async def actormem(*args: str) -> tuple[int, list[str]]:
    proc = await run_process(
        [sys.executable, "-m", "actormem.runtime.cli", *args], check=False, cwd=ROOT
    )
    return proc.returncode, proc.stderr.decode().strip().splitlines()


async def test_a_metrics_port_in_use_stops_the_worker_with_one_line(
    tmp_path: Path, redis_config: RedisConfig
) -> None:
    config_file = write_config(tmp_path / "deployment.toml", redis_config)
    with taken_port() as port:
        code, err = await actormem("worker", config_file, "--metrics-port", str(port))
    assert (code, err) == (2, [in_use(port)])


async def test_a_metrics_port_in_use_stops_a_simulation_with_one_line() -> None:
    with taken_port() as port:
        code, err = await actormem(
            "simulate", "configs/town-small.toml", "--no-progress", "--metrics-port", str(port)
        )
    assert code == 2 and err[-1] == in_use(port)
    assert [line for line in err if "Traceback" in line] == []
