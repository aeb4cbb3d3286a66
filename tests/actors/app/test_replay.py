"""Recording an LLM run's model calls (``--record``) and replaying them offline
(``--replay``) to the same report, against the loopback OpenAI-compatible server;
and the bound on the model requests in flight (``--max-in-flight``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from actormem.actors import AppConfig, CompressionConfig
from actormem.actors.app.simulation import BrainError, check_brain, report_dict, run_simulation
from actormem.actors.app.simulation.brains.recording import CALLS, MANIFEST, request_key
from actormem.runtime.cli import main
from actormem.runtime.errors import ConfigError
from tests.actors.app.test_brains import llm_config, town_model
from tests.support import ROOT
from tests.support.openai_server import OpenAIStub

pytestmark = pytest.mark.anyio

#: Report fields that measure the wall clock, or name the run rather than what it did.
_WALL_CLOCK = {
    "elapsed_s",
    "messages_per_s",
    "started_at",
    "turn_seconds",
    "memory_seconds",
    "llm_seconds",
    "compressions_wait_s",
    "memory_share",
    "llm_share",
    "pool_seconds",
    "pool_share",
    "feed_seconds",
    "own_ms_per_model_call_p50",
    "own_ms_per_model_call_p99",
    "run_id",
}


def comparable(report: dict[str, Any]) -> dict[str, Any]:
    """The report without its wall-clock figures, its run id (and the key prefix made
    of it), the recording's paths, and the count of messages the actors processed
    (a recorded or replayed run also asks its memories whether they are compressing,
    as often as the compressor's speed makes it)."""
    kept = {k: v for k, v in report.items() if k not in _WALL_CLOCK}
    kept["runtime"] = {k: v for k, v in kept["runtime"].items() if k != "processed"}
    config = json.loads(json.dumps(kept["config"]))
    config["simulation"]["run_id"] = config["redis"]["prefix"] = ""
    config["simulation"]["brain"].update(record="", replay="", base_url=None, model="")
    kept["config"] = config
    return kept


def _with(config: AppConfig, **brain: Any) -> AppConfig:
    sim = config.simulation
    return msgspec.structs.replace(
        config,
        simulation=msgspec.structs.replace(sim, brain=msgspec.structs.replace(sim.brain, **brain)),
    )


def compressing(server: OpenAIStub) -> AppConfig:
    """The LLM town of two, with a working view small enough to compress and offload."""
    config = llm_config(server)
    compression = CompressionConfig(msg_threshold=12, last_keep=4, large_payload_threshold=300)
    sim = msgspec.structs.replace(config.simulation, steps=3)
    return msgspec.structs.replace(config, compression=compression, simulation=sim)


@pytest.fixture(scope="module")
def recorded_once(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[AppConfig, dict[str, Any], Path]:
    recording = tmp_path_factory.mktemp("recorded") / "rec"
    with OpenAIStub(reply=town_model) as server:
        config = compressing(server)
        report = anyio.run(lambda: run_simulation(_with(config, record=str(recording))))
    return config, report_dict(report), recording


@pytest.fixture
def recorded(
    recorded_once: tuple[AppConfig, dict[str, Any], Path], tmp_path: Path
) -> tuple[AppConfig, dict[str, Any], Path]:
    """A recorded run (the server gone once it ends): its config, report and a copy
    of its recording to change."""
    config, report, recording = recorded_once
    copy = tmp_path / "rec"
    shutil.copytree(recording, copy)
    return config, report, copy


async def test_a_replay_gives_the_recorded_report_with_no_server(
    recorded: tuple[AppConfig, dict[str, Any], Path],
) -> None:
    config, first, recording = recorded
    assert first["compressions"] > 0 and first["llm_calls"] == 2 * 3 * 3
    lines = (recording / CALLS).read_text().splitlines()
    assert len(lines) == first["llm_calls"]
    entry = json.loads(lines[0])
    assert (entry["agent"], entry["step"], entry["attempts"]) == ("Ada", 0, 1)
    assert entry["key"] == request_key(entry["request"])
    # No server, no base URL, no model: the recording names it.
    replay = _with(config, base_url=None, model="", replay=str(recording))
    again = report_dict(await run_simulation(replay))
    assert comparable(again) == comparable(first)
    assert again["llm_tokens_in"] == first["llm_tokens_in"] > 0


def _entries(recording: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (recording / CALLS).read_text().splitlines()]


@pytest.mark.parametrize("change", ["missing", "edited"])
async def test_a_missing_or_edited_entry_is_an_error_naming_the_agent_and_step(
    recorded: tuple[AppConfig, dict[str, Any], Path], change: str
) -> None:
    config, _, recording = recorded
    entries = _entries(recording)
    victim = next(i for i, e in enumerate(entries) if e["step"] == 1)
    agent = entries[victim]["agent"]
    if change == "missing":
        del entries[victim]
    else:  # an edited request answers no request
        entries[victim]["request"]["messages"][-1]["content"] += " (edited)"
    (recording / CALLS).write_text("".join(json.dumps(e) + "\n" for e in entries))
    replay = _with(config, base_url=None, replay=str(recording))
    error = f"no recorded answer to the model request of {agent} at step 1 .*edited recording"
    with pytest.raises(BrainError, match=error):
        await run_simulation(replay)


def test_bad_recording_directories_are_refused_before_the_run(
    recorded: tuple[AppConfig, dict[str, Any], Path], tmp_path: Path
) -> None:
    config, _, recording = recorded
    a_file = tmp_path / "file"
    a_file.write_text("x")
    cases = [
        (_with(config, record=str(a_file)), "it is not a directory"),
        (_with(config, record=str(recording)), "already holds a recording"),
        (_with(config, replay=str(tmp_path / "nowhere")), "no such directory"),
        (_with(config, replay=str(tmp_path)), "no recording there"),
        (_with(config, replay=str(recording), model="other"), "recorded with the model"),
        (
            _with(config, kind="scripted", base_url=None, record=str(tmp_path / "r")),
            "needs base_url and model",
        ),
    ]
    for bad, error in cases:
        with pytest.raises(ConfigError, match=error):
            check_brain(bad)
    calls = recording / CALLS
    calls.write_text(calls.read_text() + "{not json\n")
    with pytest.raises(ConfigError, match=rf"{CALLS}:{2 * 3 * 3 + 1}: "):
        check_brain(_with(config, replay=str(recording)))
    assert (recording / MANIFEST).is_file()


def test_the_command_line_records_and_replays(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rec, first, again = tmp_path / "rec", tmp_path / "first.json", tmp_path / "again.json"
    args = ["simulate", "configs/town.toml", "--transport", "local", "--agents", "2"]
    args += ["--steps", "2", "--no-progress", "--no-run-dir"]
    with OpenAIStub(reply=town_model) as server:
        llm = ["--brain", "llm", "--base-url", server.base_url, "--model", "m"]
        assert main([*args, *llm, "--record", str(rec), "--json", str(first)]) == 0
    assert main([*args, "--brain", "llm", "--replay", str(rec), "--json", str(again)]) == 0
    assert comparable(json.loads(again.read_text())) == comparable(json.loads(first.read_text()))
    capsys.readouterr()
    code = main([*args, "--brain", "llm", "--replay", str(tmp_path / "none")])
    assert code != 0
    err = capsys.readouterr().err
    assert "--replay" in err and "no such directory" in err and "Traceback" not in err


def test_max_in_flight_bounds_the_model_requests_at_once(tmp_path: Path) -> None:
    lock = threading.Lock()
    now = most = 0

    def slow_model(body: dict[str, Any]) -> str | dict[str, Any]:
        nonlocal now, most
        with lock:
            now += 1
            most = max(most, now)
        time.sleep(0.03)  # overlapping requests overlap here
        with lock:
            now -= 1
        return town_model(body)

    args = ["simulate", "configs/town.toml", "--transport", "local", "--agents", "4"]
    args += ["--steps", "1", "--no-progress", "--no-run-dir", "--brain", "llm", "--model", "m"]
    seen = []
    for bound in (2, 4):
        most = 0
        with OpenAIStub(reply=slow_model) as server:
            assert main([*args, "--base-url", server.base_url, "--max-in-flight", str(bound)]) == 0
        seen.append(most)
    assert seen[0] == 2 < seen[1] <= 4


@pytest.mark.slow
def test_a_recording_made_in_process_replays_over_worker_processes(tmp_path: Path) -> None:
    rec, first, again = tmp_path / "rec", tmp_path / "first.json", tmp_path / "again.json"
    args = ["simulate", "configs/town.toml", "--agents", "3", "--steps", "2"]
    args += ["--no-progress", "--no-run-dir", "--brain", "llm"]
    with OpenAIStub(reply=town_model) as server:
        llm = ["--base-url", server.base_url, "--model", "m", "--record", str(rec)]
        assert main([*args, "--transport", "local", *llm, "--json", str(first)]) == 0
    command = [sys.executable, "-m", "actormem", *args, "--workers", "2"]
    command += ["--replay", str(rec), "--json", str(again)]
    proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    here, there = (comparable(json.loads(p.read_text())) for p in (first, again))
    assert (there["transport"], there["workers"], there["llm_calls"]) == ("redis", 2, 18)
    for report in (here, there):
        for key in ("transport", "workers", "config", "runtime"):
            report.pop(key)
    assert there == here
