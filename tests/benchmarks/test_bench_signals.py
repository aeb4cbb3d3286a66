"""``actormem bench`` stopped by SIGTERM or SIGINT: one line, a partial JSON with the
rows it finished (earlier results untouched), exit 143 or 130, and no worker,
server or temp dir left."""

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


def _start(argv: list[str], tmp: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACTORMEM_", "REDIS_"))}
    return subprocess.Popen(
        [sys.executable, "-m", "actormem", "bench", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**env, "TMPDIR": str(tmp)},
        start_new_session=True,
    )


def _wait_for_line(proc: subprocess.Popen[str], text: str) -> list[str]:
    """The progress lines on ``proc``'s stderr up to the one holding ``text``."""
    assert proc.stderr is not None
    lines: list[str] = []
    while text not in (lines[-1] if lines else ""):
        line = proc.stderr.readline()
        if not line:
            proc.kill()
            pytest.fail(f"no line with {text!r}: {lines}")
        lines.append(line)
    return lines


@pytest.mark.slow
@needs_proc
@pytest.mark.parametrize(
    "signum",
    [pytest.param(signal.SIGTERM, id="SIGTERM"), pytest.param(signal.SIGINT, id="SIGINT")],
)
def test_a_signal_stops_a_benchmark_with_the_rows_it_finished(tmp_path: Path, signum: int) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = tmp_path / "bench"
    out.mkdir()
    earlier = out / "distributed-20200101T000000Z.json"
    earlier.write_text("{}")  # an earlier run's result stays as it is
    argv = ["distributed", "--out", str(out), "--messages", "100000", "--workers", "2"]
    proc = _start(argv, tmp)
    # Step 2 starts once step 1 (the raw baseline) has its row.
    progress = _wait_for_line(proc, "[2/2] actormem add, 2 worker process(es)")
    processes = wait_for_family(proc, {"actormem.runtime.redis.worker": 2, "redis-server": 1})
    stdout, stderr, _ = signal_and_wait(proc, signum, whole_group=True)
    name = signal.Signals(signum).name
    assert proc.returncode == 128 + signum, stderr
    assert progress == [
        "actormem bench distributed: [1/2] raw redis-py\n",
        "actormem bench distributed: [2/2] actormem add, 2 worker process(es)\n",
    ]
    assert stderr == (
        f"actormem bench distributed: stopping ({name}): writing the rows it finished, "
        "stopping what it started...\n"
    )
    assert "PARTIAL (stopped)" in stdout
    assert "stopped during: actormem add, 2 worker process(es)" in stdout
    [written] = sorted(out.glob("distributed-*.partial.json"))
    result = json.loads(written.read_text())
    assert result["partial"] is True and result["name"] == "distributed"
    assert [row["name"] for row in result["rows"]] == ["raw redis-py XADD -> XREADGROUP -> XACK"]
    assert result["rows"][0]["value"] > 0
    assert result["stopped_during"] == "actormem add, 2 worker process(es)"
    assert earlier.read_text() == "{}"
    assert survivors(processes, within=10) == []
    assert leftovers(tmp, within=10) == []


@pytest.mark.slow
def test_a_stopped_load_run_summarises_the_seconds_it_ran(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    argv = ["load", "--out", str(out), "--agents", "5", "--rate", "200", "--duration", "60"]
    proc = _start(argv, tmp_path)
    _wait_for_line(proc, "0 s of 60 s")
    time.sleep(1.5)  # a second or two of load
    _, stderr, _ = signal_and_wait(proc, signal.SIGTERM)
    assert proc.returncode == 143, stderr
    [written] = sorted(out.glob("load-*.partial.json"))
    result = json.loads(written.read_text())
    figures = {row["name"]: row["value"] for row in result["rows"]}
    assert result["partial"] is True
    assert figures["commands sent (in-process)"] > 0
    assert figures["errors"] == 0
    assert figures["throughput (completed)"] > 0


def test_more_workers_than_the_limit_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "distributed", "--workers", "100000"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(
        "actormem bench distributed: error: argument --workers: 100000 worker processes is "
        "over this machine's limit of "
    )
