"""``bench load --config FILE`` loads a running deployment: its own agents only, its
keys gone afterwards, and one line when there is nothing to load."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from actormem.actors import Message
from actormem.actors.config import load_app_config
from actormem.actors.memory.commands import Add, Get
from actormem.benchmarks.__main__ import build_parser
from actormem.benchmarks._redis import client_runtime, workers
from actormem.benchmarks.load import run
from actormem.runtime.redis import connect
from tests.benchmarks.helpers import check_rows

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def deployment_file(tmp_path: Path, url: str, prefix: str) -> Path:
    path = tmp_path / "deployment.toml"
    path.write_text(
        f'[runtime]\ntransport = "redis"\n\n[redis]\nurl = "{url}"\nprefix = "{prefix}"\n'
        'shards = 4\n\n[compression]\nenabled = false\n\n[logging]\nlevel = "warning"\n'
    )
    return path


async def test_load_on_a_running_deployment_touches_only_its_own_agents(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    path = deployment_file(tmp_path, redis_url, redis_prefix)
    config = load_app_config(path)
    client = connect(config.redis)
    try:
        async with workers(config, 1):
            async with client_runtime(config) as (rt, _):  # an agent the deployment serves
                await rt.ask("memory/alice", Add(messages=[Message(role="user", content="hi")]))
            argv = ["load", "--config", str(path), "--agents", "5", "--rate", "50"]
            args = build_parser().parse_args([*argv, "--duration", "1", "--quiet"])
            rows = await run(args)
            check_rows("load", rows)
            figures = {row.name: row.value for row in rows}
            assert figures[f"commands sent (the deployment of {path})"] >= 40
            assert figures["throughput (completed)"] > 0
            assert figures["errors"] == 0
            pattern = f"{redis_prefix}:*:agent:memory/load-*"
            assert [key async for key in client.scan_iter(match=pattern)] == []
            async with client_runtime(config) as (rt, _):
                alice = await rt.ask("memory/alice", Get())
            assert [m.content for m in alice] == ["hi"]
    finally:
        async for key in client.scan_iter(match=f"{redis_prefix}:*"):
            await client.delete(key)
        await client.aclose()


def bench(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "actormem.benchmarks", "load", *argv, "--duration", "1", "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_deployment_without_workers_is_one_line_naming_the_shards(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    path = deployment_file(tmp_path, redis_url, redis_prefix)
    proc = bench("--config", str(path), "--wait-workers", "0.3")
    assert proc.returncode == 2
    [line] = proc.stderr.splitlines()
    assert "no worker owns shard(s) 0, 1, 2, 3 of prefix" in line
    assert "actormem worker FILE" in line


@pytest.mark.parametrize(
    ("text", "extra", "message"),
    [
        ('[redis]\nprefix = "x"\n', [], "[redis] url is not set"),
        ('[redis]\nurl = "redis://127.0.0.1:1"\n', ["--workers", "2"], "--config loads the"),
        ("[redis]\nshards = 0\n", [], "shards"),
    ],
)
def test_a_config_that_cannot_name_a_deployment_is_one_line(
    tmp_path: Path, text: str, extra: list[str], message: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    proc = bench("--config", str(path), *extra)
    assert proc.returncode == 2
    [line] = proc.stderr.splitlines()
    assert message in line
