"""Processes as /proc shows them: a program's family, which of it still runs, and
stopping a program with a signal (Linux only: the tests that use it skip elsewhere)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = (
    "after_run_line",
    "alive",
    "command",
    "family",
    "leftovers",
    "needs_proc",
    "printed",
    "signal_and_wait",
    "survivors",
    "wait_for_family",
)

#: tiktoken's download cache, which it keeps in the temp dir on purpose.
_NOT_OURS = frozenset({"data-gym-cache"})

needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")


def printed(code: str) -> str:
    """What a new Python process running ``code`` prints (it must exit with 0)."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout


def after_run_line(stderr: str) -> str:
    """``stderr`` of ``actormem simulate`` without the line naming the run, which
    every simulation prints first."""
    first, _, rest = stderr.partition("\n")
    assert first.startswith("actormem: run "), stderr
    return rest


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (state first), or None."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None


def command(pid: int) -> str:
    """The command line of ``pid`` ("" once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def alive(pid: int, started: str | None = None) -> bool:
    """Whether ``pid`` runs (a zombie does not), and is the process that started at
    ``started`` (its /proc start time) if given."""
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z" and started in (None, fields[19])


def _all_pids() -> Iterator[int]:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            yield int(entry.name)


def family(root: int) -> dict[int, str]:
    """Every process descended from ``root`` or in its process group, with its start
    time (so a later process that reuses an id is not taken for it)."""
    parents: dict[int, int] = {}
    groups: dict[int, int] = {}
    starts: dict[int, str] = {}
    for pid in _all_pids():
        fields = _stat(pid)
        if fields is not None:
            parents[pid], groups[pid], starts[pid] = int(fields[1]), int(fields[2]), fields[19]
    found = {pid for pid, group in groups.items() if group == root}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found:
                found.add(pid)
                frontier.append(pid)
    found.discard(root)
    return {pid: starts[pid] for pid in found}


def survivors(processes: dict[int, str], within: float) -> list[str]:
    """The commands of ``processes`` (from :func:`family`) still running after
    ``within`` seconds ([] as soon as none is)."""
    deadline = time.monotonic() + within
    while True:
        left = [pid for pid, started in processes.items() if alive(pid, started)]
        if not left or time.monotonic() > deadline:
            return [command(pid) for pid in left]
        time.sleep(0.05)


def wait_for_family(
    proc: subprocess.Popen[str], wanted: dict[str, int], within: float = 90
) -> dict[int, str]:
    """Wait until ``proc`` has, for each text in ``wanted``, that many processes whose
    command line holds it; its family then. Fails the test if it does not."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and proc.poll() is None:
        found = family(proc.pid)
        commands = [command(pid) for pid in found]
        if all(sum(text in c for c in commands) >= n for text, n in wanted.items()):
            return found
        time.sleep(0.1)
    if proc.poll() is None:
        proc.kill()
    _, err = proc.communicate()
    pytest.fail(f"the program did not start {wanted}: {err[-2000:]}")


def leftovers(tmp: Path, within: float) -> list[str]:
    """What is left in the temp dir ``tmp`` after ``within`` seconds ([] as soon as
    nothing is), tiktoken's cache aside."""
    deadline = time.monotonic() + within
    while True:
        left = sorted(p.name for p in tmp.iterdir() if p.name not in _NOT_OURS)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def signal_and_wait(
    proc: subprocess.Popen[str], signum: int, *, whole_group: bool = False, timeout: float = 60
) -> tuple[str, str, float]:
    """Send ``signum`` to ``proc`` (to its process group, as a terminal's Ctrl-C does,
    if ``whole_group``) and wait for it; its stdout, stderr and how long it took."""
    try:
        if whole_group:
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
        started = time.monotonic()
        out, err = proc.communicate(timeout=timeout)
        return out, err, time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
