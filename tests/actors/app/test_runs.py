"""Run isolation: every simulation run has a run id that namespaces its Redis keys.

Two runs at once on one Redis never see each other's messages; the same run id
resumes a run (its memories are there); ``--fresh`` clears the run's own
namespace and nothing else. The Redis is the tests' private server.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import msgspec
import pytest
import redis

from actormem.actors import AppConfig, MemoryRuntime
from actormem.actors.app.runs import for_run, new_run_id
from actormem.actors.app.simulation import SimulationReport, plant_facts, run_simulation
from actormem.actors.config import SimulationConfig, load_app_config
from actormem.runtime import ConfigError, RuntimeConfig
from actormem.runtime.cli import main
from actormem.runtime.redis import RedisConfig
from actormem.runtime.redis.transport import RedisTransport
from tests.support import ROOT

SMALL = SimulationConfig(agents=3, steps=4, facts_per_agent=2, fact_steps=2, concurrency=3)


def redis_app(redis_config: RedisConfig, seed: int = 7, run_id: str = "") -> AppConfig:
    simulation = msgspec.structs.replace(SMALL, seed=seed, run_id=run_id)
    return AppConfig(
        runtime=RuntimeConfig(transport="redis"), redis=redis_config, simulation=simulation
    )


def shared_redis_toml(directory: Path, redis_config: RedisConfig) -> Path:
    """A config file naming the test's Redis and prefix, as a user's shared server."""
    path = directory / "shared-redis.toml"
    path.write_text(
        f'[runtime]\ntransport = "redis"\n'
        f'[redis]\nurl = "{redis_config.url}"\nprefix = "{redis_config.prefix}"\n'
        "shards = 4\nblock_ms = 100\nlease_ms = 1000\n"
    )
    return path


def seen(report: SimulationReport) -> int:
    """Messages in the run's agents' memories (no compression at this size)."""
    return sum(a.messages for a in report.per_agent)


@pytest.fixture
def sync_client(redis_config: RedisConfig) -> Iterator[redis.Redis]:
    """A plain client; the test's keys (its prefix, namespaces included) go afterwards."""
    client = redis.Redis.from_url(redis_config.url or "")
    try:
        yield client
    finally:
        for key in client.scan_iter(match=f"{redis_config.prefix}:*", count=500):
            client.delete(key)
        client.close()


# -- run ids and namespaces ----------------------------------------------------------------


def test_run_ids_are_new_every_time_and_name_a_namespace() -> None:
    ids = {new_run_id() for _ in range(50)}
    assert len(ids) == 50
    for run_id in ids:
        assert RedisConfig().namespaced(run_id).prefix == f"am:{run_id}"


def test_a_run_gets_its_id_and_namespace_once() -> None:
    config = for_run(AppConfig(), "r1")
    assert config.simulation.run_id == "r1"
    assert config.redis.prefix == "am:r1"


@pytest.mark.parametrize("bad", ["", "a:b", "a*", "a b", "{s1}", "-x", "x" * 65])
def test_a_bad_namespace_or_run_id_is_refused_by_name(bad: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="namespace must be"):
        RedisConfig().namespaced(bad)
    with pytest.raises(ValueError, match="namespace must be"):
        MemoryRuntime(namespace=bad)
    if bad:
        path = tmp_path / "run.toml"
        path.write_text(f"[simulation]\nrun_id = {json.dumps(bad)}\n")
        with pytest.raises(ConfigError, match="key 'simulation': run_id must be"):
            load_app_config(path)


def test_a_namespace_and_a_ready_transport_do_not_mix() -> None:
    with pytest.raises(ValueError, match="namespaced"):
        MemoryRuntime(transport=RedisTransport("redis://h", RedisConfig()), namespace="n")


def test_a_cli_run_id_is_checked_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["simulate", "--run-id", "a:b"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a run id must be" in err[0]


# -- against one Redis ---------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.anyio
async def test_two_runs_at_once_never_see_each_others_messages(
    redis_config: RedisConfig, sync_client: redis.Redis
) -> None:
    reports: dict[int, SimulationReport] = {}

    async def run(seed: int) -> None:
        reports[seed] = await run_simulation(redis_app(redis_config, seed))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, 1)
        tg.start_soon(run, 2)
    assert reports[1].run_id != reports[2].run_id
    for report in reports.values():
        assert report.transport == "redis"
        # Each agent holds exactly what its own run added: nothing of the other's.
        assert seen(report) == report.messages_processed
        assert report.runtime.failures == 0
    # Same agent names, different facts: none of run 1's answers reached run 2.
    names = [a.agent for a in reports[1].per_agent]
    assert names == [a.agent for a in reports[2].per_agent]
    answers = {f.answer for f in plant_facts(names, SMALL.facts_per_agent, 1)}
    other = MemoryRuntime(redis_app(redis_config), namespace=reports[2].run_id)
    async with other as rt:
        for name in names:
            history = "\n".join(m.text() for m in await rt.memory(name).get(scope="history"))
            assert not any(answer in history for answer in answers)
    # The keys of both runs are under their own namespaces, none under the bare prefix.
    keys = [k.decode() for k in sync_client.scan_iter(match=f"{redis_config.prefix}:*")]
    runs = {k.split(":")[1] for k in keys}
    assert runs == {reports[1].run_id, reports[2].run_id}


@pytest.mark.slow
@pytest.mark.anyio
async def test_the_same_run_id_resumes_the_run_and_a_new_one_starts_empty(
    redis_config: RedisConfig, sync_client: redis.Redis
) -> None:
    first = await run_simulation(redis_app(redis_config, run_id="resumed"))
    again = await run_simulation(redis_app(redis_config, run_id="resumed"))
    other = await run_simulation(redis_app(redis_config))
    assert first.run_id == again.run_id == "resumed"
    assert seen(first) == first.messages_processed
    # The resumed run found its agents' memories and added to them.
    assert seen(again) == first.messages_processed + again.messages_processed
    assert again.tokens_stored > first.tokens_stored
    assert other.run_id != "resumed" and seen(other) == other.messages_processed


@pytest.mark.slow
def test_fresh_clears_the_runs_own_namespace_and_nothing_else(
    tmp_path: Path,
    redis_config: RedisConfig,
    sync_client: redis.Redis,
    capsys: pytest.CaptureFixture[str],
) -> None:
    prefix = redis_config.prefix
    path = shared_redis_toml(tmp_path, redis_config)
    base = ["simulate", str(path), "--agents", "3", "--steps", "4", "--no-progress"]

    def simulate(*extra: str) -> tuple[dict[str, object], list[str]]:
        out = tmp_path / "report.json"
        assert main([*base, "--json", str(out), *extra]) == 0
        err = capsys.readouterr().err.splitlines()
        return json.loads(out.read_text()), [line for line in err if line.startswith("actormem:")]

    first, said = simulate("--run-id", "town-1")
    assert first["run_id"] == "town-1"
    assert said == [f"actormem: run town-1 (Redis keys under {prefix}:town-1:*)"]
    # Keys of another namespace and of the bare prefix, which no run may touch.
    sync_client.set(f"{prefix}:town-10:keep", "x")
    sync_client.set(f"{prefix}:town-2:keep", "x")
    sync_client.set(f"{prefix}:{{s0}}:keep", "x")

    resumed, said = simulate("--run-id", "town-1")
    assert len(said) == 2 and said[1].startswith("actormem: run town-1 resumes: ")
    assert f"already under {prefix}:town-1:*" in said[1]
    assert resumed["tokens_stored"] > first["tokens_stored"]

    fresh, said = simulate("--run-id", "town-1", "--fresh")
    assert len(said) == 2 and said[1].startswith("actormem: run town-1: cleared ")
    assert fresh["tokens_stored"] == first["tokens_stored"]
    assert fresh["messages_processed"] == first["messages_processed"]
    for key in ("town-10:keep", "town-2:keep", "{s0}:keep"):
        assert sync_client.get(f"{prefix}:{key}") == b"x", key

    _, said = simulate()  # a new run: a new id, an empty namespace, one line
    assert len(said) == 1 and "town-1" not in said[0]


@pytest.mark.slow
def test_two_simulate_processes_at_once_keep_to_their_runs(
    tmp_path: Path, redis_config: RedisConfig, sync_client: redis.Redis
) -> None:
    """As users run them: two ``actormem simulate`` on one configured Redis at once,
    the same seed, one of them with worker processes."""
    prefix = redis_config.prefix
    path = shared_redis_toml(tmp_path, redis_config)
    base = [sys.executable, "-m", "actormem", "simulate", str(path), "--agents", "4"]
    runs = {"here": [], "workers": ["--workers", "2"]}
    procs = {
        name: subprocess.Popen(
            [
                *base,
                "--steps",
                "5",
                "--no-progress",
                "--json",
                str(tmp_path / f"{name}.json"),
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for name, extra in runs.items()
    }
    reports = {}
    for name, proc in procs.items():
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        reports[name] = json.loads((tmp_path / f"{name}.json").read_text())
        assert err.startswith(f"actormem: run {reports[name]['run_id']} (Redis keys under ")
    assert reports["here"]["run_id"] != reports["workers"]["run_id"]
    for report in reports.values():
        held = sum(a["messages"] for a in report["per_agent"])
        assert held == report["messages_processed"]
    # Every key either run made is in its own namespace (the workers' too).
    keys = [k.decode() for k in sync_client.scan_iter(match=f"{prefix}:*")]
    assert {k.split(":")[1] for k in keys} == {r["run_id"] for r in reports.values()}
