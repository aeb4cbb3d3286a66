"""``actormem bench`` stopped by SIGTERM or SIGINT: one line, a partial JSON next to
the last full result, exit 143 or 130, and no worker, server or temp dir left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from actormem.runtime.cli import main
from tests.support import ROOT
from tests.support.processes import (
    leftovers,
    needs_proc,
    signal_and_wait,
    survivors,
    wait_for_family,
)


@pytest.mark.slow
@needs_proc
@pytest.mark.parametrize(
    "signum",
    [pytest.param(signal.SIGTERM, id="SIGTERM"), pytest.param(signal.SIGINT, id="SIGINT")],
)
def test_a_signal_stops_a_benchmark_with_a_partial_result(tmp_path: Path, signum: int) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = tmp_path / "bench"
    out.mkdir()
    (out / "distributed.json").write_text("{}")  # the last full result stays
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACTORMEM_", "REDIS_"))}
    bench = ["bench", "distributed", "--out", str(out), "--messages", "100000"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "actormem", *bench, "--workers", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**env, "TMPDIR": str(tmp)},
        start_new_session=True,
    )
    processes = wait_for_family(proc, {"actormem.runtime.redis.worker": 2, "redis-server": 1})
    time.sleep(1)
    stdout, stderr, _ = signal_and_wait(proc, signum, whole_group=True)
    name = signal.Signals(signum).name
    assert proc.returncode == 128 + signum, stderr
    assert stderr == (
        f"actormem bench distributed: stopping ({name}): stopping its workers and servers, "
        "writing a partial result...\n"
    )
    assert "PARTIAL (stopped)" in stdout
    result = json.loads((out / "distributed.partial.json").read_text())
    assert result["partial"] is True and result["name"] == "distributed"
    assert (out / "distributed.json").read_text() == "{}"
    assert survivors(processes, within=10) == []
    assert leftovers(tmp, within=10) == []


def test_more_workers_than_the_limit_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "distributed", "--workers", "100000"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("actormem bench distributed: error: 100000 worker processes is over")
