"""Clean lifecycles, as a user (or Slurm, ``timeout``, ``docker stop``) meets them.

``actormem simulate --workers 2`` stopped by SIGTERM or SIGINT writes a partial
report and JSON, says in one line what it does, and leaves no process and no temp
dir behind; SIGKILLed, it leaves none either (parent-death signal and watchdog).
``actormem worker`` stops the same way. ``--workers`` is bounded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from actormem.runtime.cli import ECHO_WINDOW, main
from actormem.runtime.redis.keys import Keys
from actormem.runtime.redis.worker import WORKERS_PER_CPU, worker_limit
from tests.support import ROOT
from tests.support.processes import (
    after_run_line,
    family,
    leftovers,
    needs_proc,
    signal_and_wait,
    survivors,
    wait_for_family,
)

_SIMULATE = [sys.executable, "-m", "actormem", "simulate", "configs/town.toml", "--no-progress"]


def _env(tmp: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ACTORMEM_", "REDIS_")) or k == "ACTORMEM_RUNS_DIR"
    }
    env["TMPDIR"] = str(tmp)
    return env


def _start_with_workers(
    tmp_path: Path, *extra: str
) -> tuple[subprocess.Popen[str], dict[int, str]]:
    """``simulate --workers 2`` (a small town, many steps) once its workers, its
    redis-server and its watchdog run; the process and its family."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen(
        [*_SIMULATE, "--workers", "2", "--agents", "6", "--steps", "100000", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=_env(tmp),
        start_new_session=True,
    )
    wait_for_family(proc, {"actormem.runtime.redis.worker": 2, "redis-server": 1})
    time.sleep(3)  # into the run: its workers own the shards and it is taking steps
    assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
    return proc, family(proc.pid)


@pytest.mark.slow
@needs_proc
@pytest.mark.parametrize(
    "signum",
    [pytest.param(signal.SIGTERM, id="SIGTERM"), pytest.param(signal.SIGINT, id="SIGINT")],
)
def test_a_signal_stops_a_run_with_workers_with_a_partial_report_and_leaves_nothing(
    tmp_path: Path, signum: int
) -> None:
    out = tmp_path / "report.json"
    proc, processes = _start_with_workers(tmp_path, "--json", str(out))
    assert len(processes) >= 4, processes  # 2 workers, redis-server, the watchdog
    # Ctrl-C signals the terminal's foreground group: here the simulation's own.
    stdout, stderr, took = signal_and_wait(proc, signum, whole_group=True)
    name = signal.Signals(signum).name
    assert proc.returncode == 128 + signum, stderr
    stderr = after_run_line(stderr)
    assert stderr.startswith(f"actormem: stopping ({name}): "), stderr
    assert stderr.count("\n") == 1 and "draining 2 workers" in stderr, stderr
    assert "PARTIAL (stopped)" in stdout
    assert "partial report written to" in stdout
    report = json.loads(out.read_text())
    assert report["partial"] is True
    assert report["agents"] == 6
    assert 0 <= report["steps_completed"] < report["steps"] == 100_000
    assert survivors(processes, within=10) == []
    assert leftovers(tmp_path / "tmp", within=10) == []
    # A few seconds: turns in flight, the partial report, and the workers' drain.
    assert took < 30, f"took {took:.1f}s to stop"


@pytest.mark.slow
@needs_proc
def test_a_sigkilled_run_leaves_no_process_and_no_temp_dir(tmp_path: Path) -> None:
    proc, processes = _start_with_workers(tmp_path)
    assert len(processes) >= 4, processes
    proc.kill()
    proc.communicate()
    # The workers and redis-server get SIGTERM from the kernel; the watchdog waits
    # for them (SIGKILL after a grace period) and removes their temp dirs.
    assert survivors(processes, within=30) == []
    assert leftovers(tmp_path / "tmp", within=10) == []


@pytest.mark.slow
@needs_proc
def test_a_second_signal_ends_the_run_at_once_and_still_leaves_nothing(tmp_path: Path) -> None:
    proc, processes = _start_with_workers(tmp_path)
    assert proc.stderr is not None
    assert proc.stderr.readline().startswith("actormem: run ")
    os.killpg(proc.pid, signal.SIGINT)
    first = proc.stderr.readline()  # the first signal is handled: send the second
    time.sleep(ECHO_WINDOW)  # sooner, it would be taken as the first one's echo
    _, rest, _ = signal_and_wait(proc, signal.SIGINT, whole_group=True)
    assert proc.returncode == 130, first + rest
    assert first + rest == (
        "actormem: stopping (SIGINT): finishing the turns in flight, writing the partial "
        "report, draining 2 workers, stopping the embedded Redis...\n"
        "actormem: stopping at once (SIGINT again)\n"
    )
    assert survivors(processes, within=30) == []
    assert leftovers(tmp_path / "tmp", within=10) == []


@pytest.mark.slow
@needs_proc
def test_the_worker_command_stops_on_sigterm_in_one_line(redis_url: str, tmp_path: Path) -> None:
    config = tmp_path / "worker.toml"
    prefix = f"lifecycle{os.getpid()}"
    config.write_text(f'[redis]\nurl = "{redis_url}"\nprefix = "{prefix}"\n')
    proc = subprocess.Popen(
        [sys.executable, "-m", "actormem", "--log-level", "warning", "worker", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=_env(tmp_path),
    )
    # Registered, it watches the signals (a signal before the interpreter got that far
    # would end it by the default action).
    _wait_until_registered(proc, redis_url, Keys(prefix).workers())
    stdout, stderr, _ = signal_and_wait(proc, signal.SIGTERM)
    assert proc.returncode == 143, stderr
    assert stderr == (
        "actormem: stopping (SIGTERM): draining its mailboxes and handing its shards back...\n"
    )
    assert stdout == ""


def _wait_until_registered(proc: subprocess.Popen[str], redis_url: str, key: str) -> None:
    client = redis.Redis.from_url(redis_url)
    try:
        deadline = time.monotonic() + 60
        while not client.zcard(key):
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the worker did not register"
            time.sleep(0.1)
    finally:
        client.close()


def test_more_workers_than_the_limit_is_a_one_line_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    limit = worker_limit()
    assert limit == WORKERS_PER_CPU * len(os.sched_getaffinity(0))
    assert main(["simulate", "configs/town.toml", "--workers", "100000"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"actormem: error: --workers 100000 is over the limit of {limit} worker processes "
        f"({WORKERS_PER_CPU} per CPU core); raise it with --max-workers N or "
        "[simulation] max_workers\n"
    )
    assert main(["simulate", "--workers", "3", "--max-workers", "2"]) == 2
    assert "--workers 3 is over the limit of 2 worker processes;" in capsys.readouterr().err


def test_the_limit_comes_from_the_config_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bounded.toml"
    config.write_text("[simulation]\nmax_workers = 1\n")
    assert main(["simulate", str(config), "--workers", "2"]) == 2
    assert "--workers 2 is over the limit of 1 worker processes;" in capsys.readouterr().err
    config.write_text("[simulation]\nmax_workers = -1\n")
    assert main(["simulate", str(config), "--workers", "2"]) == 2
    assert "max_workers must be >= 0, got -1" in capsys.readouterr().err
