"""The scripted brain tells the same story for the same seed: whatever order the turns
of a step overlap in, and (one turn at a time) on any transport."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from actormem.runtime.cli import main
from tests.actors.app.test_replay import comparable
from tests.support import ROOT

_TOWN = """
[runtime]
transport = "redis"

[simulation]
scenario = "{scenario}"
agents = 16
steps = 10
seed = 7
facts_per_agent = 3
context_tokens = 4096
concurrency = {concurrency}

[longterm]
mode = "both"
"""

#: What the run did, as against where and how fast (and the final contexts, whose
#: messages come in the order the overlapping turns happened to take).
_PLACE = {"transport", "workers", "config", "runtime", "tokens_in_final_contexts"}


def _town(tmp_path: Path, concurrency: int) -> Path:
    path = tmp_path / f"town-{concurrency}.toml"
    scenario = ROOT / "configs" / "scenarios" / "town.toml"
    path.write_text(_TOWN.format(scenario=scenario, concurrency=concurrency))
    return path


def _in_process(config: Path, out: Path) -> dict[str, Any]:
    args = ["simulate", str(config), "--transport", "local", "--no-progress", "--no-run-dir"]
    assert main([*args, "--json", str(out)]) == 0
    return json.loads(out.read_text())  # type: ignore[no-any-return]


def _story(report: dict[str, Any]) -> dict[str, Any]:
    kept = {k: v for k, v in comparable(report).items() if k not in _PLACE}
    kept["per_agent"] = sorted(
        ({k: v for k, v in a.items() if k != "context_tokens"} for a in kept["per_agent"]),
        key=lambda a: a["agent"],
    )
    return kept


def test_overlapping_turns_tell_the_same_story(tmp_path: Path) -> None:
    one = _in_process(_town(tmp_path, 1), tmp_path / "one.json")
    many = _in_process(_town(tmp_path, 50), tmp_path / "many.json")
    assert one["insights_shared"] > 0 and one["tokens_stored"] > 0
    assert _story(many) == _story(one)


@pytest.mark.slow
def test_worker_processes_tell_the_same_story_as_one_process(tmp_path: Path) -> None:
    config = _town(tmp_path, 1)
    here = comparable(_in_process(config, tmp_path / "here.json"))
    out = tmp_path / "workers.json"
    command = [sys.executable, "-m", "actormem", "simulate", str(config), "--workers", "2"]
    command += ["--no-progress", "--no-run-dir", "--json", str(out)]
    proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    there = comparable(json.loads(out.read_text()))
    assert (there["transport"], there["workers"]) == ("redis", 2)
    # One turn at a time, even the final contexts are the same.
    for report in (here, there):
        for key in ("transport", "workers", "config", "runtime"):
            report.pop(key)
    assert there == here
