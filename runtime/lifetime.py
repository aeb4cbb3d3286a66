"""Child processes and temp dirs that end with the process that made them.

A program that is stopped cleanly stops its children and removes its temp dirs
itself. For a program that cannot (SIGKILL, the OOM killer, a crash) two things
take over:

- :func:`die_with_parent` gives a child Linux's parent-death signal: the kernel
  sends it SIGTERM when this process dies (more exactly, when the thread that
  started it ends, so children are started from the thread that runs the event
  loop).
- :func:`keeper` is a watchdog: a small process of its own (this file run as a
  script, standard library only) that holds the read end of a pipe from this
  process. It is told which children and temp dirs to look after and which no
  longer need it; when the pipe reaches end of file, which the kernel guarantees
  however this process ended, it stops the children still running (SIGTERM, then
  SIGKILL after :data:`GRACE` seconds) and removes the temp dirs left behind.
  It runs in a session of its own, so a terminal's Ctrl-C does not reach it. A
  dir may also be left to it on purpose, to outlive the code that made it until
  this process ends (worker logs, read after the workers stopped).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Final

__all__ = ("GRACE", "Keeper", "die_with_parent", "keeper")

#: prctl(2) option: the signal a child gets when its parent dies (Linux).
_PR_SET_PDEATHSIG: Final = 1
#: How long the keeper lets orphaned children stop after SIGTERM before SIGKILL.
GRACE: Final = 3.0
#: How often the keeper looks whether the children it stopped are gone.
_POLL: Final = 0.05


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` for :class:`subprocess.Popen` that makes the child get
    SIGTERM when this process dies (Linux's parent-death signal); None elsewhere."""
    if sys.platform != "linux":
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def set_signal() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the signal was set
            os._exit(1)

    return set_signal


def _started(pid: int) -> str:
    """When process ``pid`` started (its /proc start time), to tell it from a later
    process that got the same id; "" where there is no /proc."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return ""


def _running(pid: int, started: str) -> bool:
    """Whether ``pid`` is still the process that started at ``started`` and not a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        if Path("/proc/self/stat").exists():
            return False
        try:
            os.kill(pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    return fields[0] != "Z" and (not started or fields[19] == started)


class Keeper:
    """This process's side of the watchdog: tells it what to look after.

    A tracked dir is removed when this process ends (at exit, or by the watchdog
    if it dies), unless it was untracked before. Without a watchdog (it could not
    be started, or it is gone) the children are left to their parent-death signal
    and the dirs to the exit handler.
    """

    def __init__(self) -> None:
        self.owner = os.getpid()
        self._lock = threading.Lock()
        self._dirs: set[str] = set()
        self._pipe: IO[str] | None = None
        self._proc: subprocess.Popen[str] | None = None
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", __file__],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                text=True,
                start_new_session=True,
            )
        except OSError:
            self._proc = None
        else:
            self._pipe = self._proc.stdin
        atexit.register(self.close)

    def track_pid(self, pid: int) -> None:
        """Stop child ``pid`` if this process dies while it runs."""
        self._say(f"pid {pid} {_started(pid) or '-'}")

    def untrack_pid(self, pid: int) -> None:
        """Child ``pid`` has ended (or been stopped): leave it alone."""
        self._say(f"unpid {pid}")

    def track_dir(self, path: Path) -> None:
        """Remove ``path`` when this process ends, unless it was removed before."""
        with self._lock:
            self._dirs.add(str(path))
        self._say(f"dir {path}")

    def untrack_dir(self, path: Path) -> None:
        """``path`` has been removed (or is to be kept): leave it alone."""
        with self._lock:
            self._dirs.discard(str(path))
        self._say(f"undir {path}")

    def _say(self, line: str) -> None:
        with self._lock:
            if self._pipe is None:
                return
            try:
                self._pipe.write(line + "\n")
                self._pipe.flush()
            except (OSError, ValueError):
                self._pipe = None

    def close(self) -> None:
        """End the watchdog (at exit): it stops and removes whatever is still tracked
        (the dirs are removed here too, in case there is no watchdog)."""
        with self._lock:
            pipe, self._pipe = self._pipe, None
            dirs, self._dirs = self._dirs, set()
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
        if self.owner != os.getpid():
            return
        if self._proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(GRACE + 2.0)
        for path in dirs:
            shutil.rmtree(path, ignore_errors=True)


_keeper: Keeper | None = None
_keeper_lock = threading.Lock()


def keeper() -> Keeper:
    """This process's watchdog, started on first use (again in a forked child, whose
    parent's watchdog looks after the parent)."""
    global _keeper
    with _keeper_lock:
        if _keeper is None or _keeper.owner != os.getpid():
            _keeper = Keeper()
        return _keeper


def _watch() -> None:
    """The watchdog: read what to look after until end of file, then clean up."""
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    pids: dict[int, str] = {}
    dirs: list[str] = []
    for line in sys.stdin:
        what, _, arg = line.rstrip("\n").partition(" ")
        if what == "pid":
            pid, _, started = arg.partition(" ")
            pids[int(pid)] = "" if started == "-" else started
        elif what == "unpid":
            pids.pop(int(arg), None)
        elif what == "dir":
            dirs.append(arg)
        elif what == "undir" and arg in dirs:
            dirs.remove(arg)
    _stop_all(pids)
    for path in dirs:
        shutil.rmtree(path, ignore_errors=True)


def _stop_all(pids: dict[int, str]) -> None:
    alive = {pid: started for pid, started in pids.items() if _running(pid, started)}
    for pid in alive:
        _send(pid, signal.SIGTERM)
    deadline = time.monotonic() + GRACE
    while alive and time.monotonic() < deadline:
        time.sleep(_POLL)
        alive = {pid: started for pid, started in alive.items() if _running(pid, started)}
    for pid in alive:
        _send(pid, signal.SIGKILL)
    deadline = time.monotonic() + 1.0
    while alive and time.monotonic() < deadline:
        time.sleep(_POLL)
        alive = {pid: started for pid, started in alive.items() if _running(pid, started)}


def _send(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signum)


if __name__ == "__main__":
    _watch()
