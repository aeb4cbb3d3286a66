"""The commands the docs show run as written.

Every ``actormem simulate`` command of the README and docs/ that uses only files
shipped in the repository is started as printed, from a directory that holds the
repository's ``configs/`` and ``docs/``: it must get past its checks and start its
run (a command the page shows failing must fail the way the page says). The brain
of docs/simulation.md runs to its end, and docs/examples/traffic.py runs against a
worker, as docs/operations.md runs it.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import ROOT

pytestmark = pytest.mark.slow

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
ACTORMEM = str(Path(sys.executable).with_name("actormem"))
#: Options that need something the repository does not ship: a model endpoint, a
#: recording, a free port on the machine.
NEEDS_MORE = ("--base-url", "--replay", "--record", "--metrics-port")
#: The line a simulation prints once its checks passed and its run began.
RUN_STARTED = "actormem: run "


def shown_commands() -> Iterator[tuple[str, str, str]]:
    """(page, command, the line after it) for each ``actormem simulate`` line of a
    page's code blocks, continuation lines joined and comments cut."""
    for page in PAGES:
        body = page.read_text(encoding="utf-8")
        for block in re.findall(r"^```[^\n]*\n(.*?)^```", body, re.S | re.M):
            lines = block.replace("\\\n", " ").splitlines()
            for n, line in enumerate(lines):
                text = line.split(" #", 1)[0].strip().removeprefix("$ ")
                if re.match(r"(?:[A-Z_]+=\S+ )*actormem simulate\b", text):
                    after = lines[n + 1].strip() if n + 1 < len(lines) else ""
                    yield page.name, " ".join(text.split()), after


def runnable(command: str) -> bool:
    """The command names only shipped files and no placeholder or outside service."""
    words = shlex.split(command)
    if any(w.startswith(NEEDS_MORE) for w in words):
        return False
    if any(re.fullmatch(r"\[?[A-Z][A-Z_|]*\]?", w) for w in words[2:]):  # CONFIG, N, ...
        return False
    paths = [w for w in words if w.endswith(".toml")]
    return all((ROOT / p).is_file() for p in paths)


def failing(after: str) -> str:
    """The line after a command, when it is the error the page shows it ending with."""
    return after if after.startswith("actormem: error:") else ""


COMMANDS = sorted({(c, failing(a)) for _, c, a in shown_commands() if runnable(c)})


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A working directory like the repository's root, where runs write their files."""
    for name in ("configs", "docs"):
        (tmp_path / name).symlink_to(ROOT / name)
    return tmp_path


def start(command: str, cwd: Path) -> subprocess.Popen[str]:
    words = shlex.split(command)
    env = dict(os.environ)
    while "=" in words[0]:
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    assert words[0] == "actormem"
    return subprocess.Popen(
        [ACTORMEM, *words[1:]],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def test_the_docs_show_simulate_commands() -> None:
    assert len(COMMANDS) >= 5, COMMANDS
    shown = {c for c, _ in COMMANDS}
    assert any("--scenario configs/scenarios/rumour.toml" in c for c in shown)


@pytest.mark.parametrize(("command", "after"), COMMANDS, ids=[c for c, _ in COMMANDS])
def test_a_simulate_command_starts_as_written(command: str, after: str, checkout: Path) -> None:
    proc = start(command, checkout)
    assert proc.stderr is not None
    err = []
    try:
        for line in proc.stderr:  # ends when the process closes stderr
            err.append(line)
            if line.startswith(RUN_STARTED):
                proc.send_signal(signal.SIGINT)  # it started: stop it, partial report
                break
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    err.extend(proc.stderr.readlines())
    proc.stderr.close()
    said = "".join(err)
    if after.startswith("actormem: error:"):  # the page shows it failing
        assert proc.returncode == 2, said
        key = re.search(r"key '[^']+'", after)
        assert key and key.group() in said, said
    else:
        assert RUN_STARTED in said, said
        assert proc.returncode in (0, 130), said


def test_the_brain_of_the_docs_runs_to_its_end(checkout: Path) -> None:
    page = (ROOT / "docs" / "simulation.md").read_text(encoding="utf-8")
    [command] = [c for p, c, _ in shown_commands() if p == "simulation.md" and "gossip" in c]
    assert command in page
    proc = subprocess.run(
        [ACTORMEM, *shlex.split(command)[2:]],
        cwd=checkout,
        env={**os.environ, "PYTHONPATH": "docs/examples"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"actor failures / restarts\s*│\s*0 / 0", proc.stdout), proc.stdout


def test_the_traffic_of_the_operations_page_runs(redis_url: str, tmp_path: Path) -> None:
    """docs/examples/traffic.py against a worker, as docs/operations.md runs it: its
    command to ``ghost/x`` ends as the dead letter the page shows."""
    config = tmp_path / "deploy.toml"
    prefix = f"docs{os.getpid()}"
    config.write_text(
        f'[runtime]\ntransport = "redis"\n\n[redis]\nurl = "{redis_url}"\n'
        f'prefix = "{prefix}"\nshards = 8\nlease_ms = 3000\n'
    )
    worker = subprocess.Popen(
        [ACTORMEM, "worker", str(config), "--worker-id", "host-a"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        assert wait_for([ACTORMEM, "health", str(config)], "ok"), "the worker never took its shards"
        traffic = subprocess.run(
            [sys.executable, str(ROOT / "docs" / "examples" / "traffic.py"), str(config)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert traffic.returncode == 0, traffic.stderr
        assert traffic.stdout.strip() == "traffic sent"
        assert wait_for([ACTORMEM, "dead-letters", "list", str(config)], "ghost/x")
        agents = subprocess.run(
            [ACTORMEM, "inspect", str(config), "--agents"], capture_output=True, text=True
        )
        assert "agents: 23 stored" in agents.stdout, agents.stdout
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
        subprocess.run(
            [sys.executable, "-c", CLEAR, redis_url, prefix], check=True, capture_output=True
        )


#: Deletes the test's keys (the prefix is the test's own).
CLEAR = """
import sys, anyio
from actormem.runtime.redis import RedisConfig, clear_prefix
anyio.run(clear_prefix, RedisConfig(url=sys.argv[1], prefix=sys.argv[2]))
"""


def wait_for(command: list[str], text: str, limit: float = 60.0) -> bool:
    """Run ``command`` until its output holds ``text``: a bound on waiting, no timing."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=limit)
        if text in proc.stdout:
            return True
    return False
