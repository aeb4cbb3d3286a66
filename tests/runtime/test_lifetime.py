"""Children and temp dirs end with their parent, even a SIGKILLed one."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.support.processes import alive, needs_proc

pytestmark = [pytest.mark.slow, needs_proc]

# A parent that starts two children (one with the parent-death signal, one looked
# after by the watchdog only), makes a tracked temp dir, says so, and waits.
_PARENT = textwrap.dedent(
    """
    import subprocess, sys, tempfile, time
    from pathlib import Path
    from actormem.runtime.lifetime import die_with_parent, keeper

    signalled = subprocess.Popen(["sleep", "600"], preexec_fn=die_with_parent())
    watched = subprocess.Popen(["sleep", "600"], start_new_session=True)
    keeper().track_pid(watched.pid)
    kept = Path(tempfile.mkdtemp(prefix="actormem-test-"))
    keeper().track_dir(kept)
    (kept / "file").write_text("x")
    done = Path(tempfile.mkdtemp(prefix="actormem-done-"))
    keeper().track_dir(done)
    done.rmdir()
    keeper().untrack_dir(done)
    print(signalled.pid, watched.pid, kept, flush=True)
    time.sleep(600)
    """
)


def _gone(pid: int, path: Path, within: float) -> bool:
    deadline = time.monotonic() + within
    while alive(pid) or path.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_sigkilled_parent_leaves_no_child_and_no_temp_dir(tmp_path: Path) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT],
        stdout=subprocess.PIPE,
        text=True,
        env={"TMPDIR": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    try:
        assert parent.stdout is not None
        signalled, watched, kept = parent.stdout.readline().split()
        assert alive(int(signalled)) and alive(int(watched)) and Path(kept).is_dir()
        parent.kill()
        parent.communicate()
        assert _gone(int(signalled), Path(kept), within=10)
        assert _gone(int(watched), Path(kept), within=10)
        assert list(tmp_path.iterdir()) == []
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.communicate()
