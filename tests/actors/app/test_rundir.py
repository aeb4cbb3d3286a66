"""The run directory: every run leaves run.json, report.json, its events and its time
series (a stopped or failed run too), ``--plot`` draws them, and bad output paths are
refused before anything runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from actormem.actors import AppConfig
from actormem.actors.app.simulation import BrainError, report_dict, run_simulation
from actormem.actors.app.simulation.plots import PLOTS, draw_plots
from actormem.actors.app.simulation.rundir import RunDir
from actormem.actors.app.simulation.timeline import Event, StepRow
from actormem.actors.compression.config import CompressionConfig
from actormem.actors.config import BrainConfig, SimulationConfig
from actormem.runtime import RuntimeConfig
from actormem.runtime.cli import main
from tests.actors.app.test_brains import llm_config, town_model
from tests.support.openai_server import OpenAIStub

pytestmark = pytest.mark.anyio

_PNG = b"\x89PNG\r\n\x1a\n"


def _config(steps: int, **simulation: Any) -> AppConfig:
    """A small town with a budget small enough that the memories compress."""
    return AppConfig(
        runtime=RuntimeConfig(transport="local"),
        compression=CompressionConfig(
            max_tokens=2_000, msg_threshold=12, last_keep=4, large_payload_threshold=600
        ),
        simulation=SimulationConfig(
            agents=4, steps=steps, fact_steps=2, tool_call_rate=0.5, **simulation
        ),
    )


def _lines(path: Path, type_: type[Any]) -> list[Any]:
    decoder = msgspec.json.Decoder(type_)
    return [decoder.decode(line) for line in path.read_bytes().splitlines()]


async def test_a_run_writes_every_file_and_its_story(tmp_path: Path) -> None:
    run_dir = RunDir.create(tmp_path, "town-1")
    report = await run_simulation(_config(8, run_id="town-1"), run_dir=run_dir)
    path = tmp_path / "town-1"
    info = json.loads((path / "run.json").read_text())
    assert (info["status"], info["partial"], info["steps_completed"]) == ("finished", False, 8)
    assert (info["run_id"], info["transport"], info["brain"], info["seed"]) == (
        "town-1",
        "local",
        "scripted",
        7,
    )
    assert info["version"] and info["started_at"] <= info["ended_at"]
    assert info["config"]["compression"]["msg_threshold"] == 12
    assert json.loads((path / "report.json").read_text()) == json.loads(
        msgspec.json.encode(report_dict(report))
    )

    events = _lines(path / "events.jsonl", Event)
    kinds = {e.kind for e in events}
    assert {"message", "tool_call", "share", "compression"} <= kinds
    assert all(-1 <= e.step < 8 and e.agent for e in events if e.kind != "failure")
    told = [e for e in events if e.kind == "message" and e.name == "narrator"]
    assert len(told) == 4 * 2 and all(e.tokens and e.text for e in told)
    assert all(e.tool and e.call_id for e in events if e.kind == "tool_call")
    compressed = [e for e in events if e.kind == "compression"]
    assert sum(e.compressions or 0 for e in compressed) == report.compressions > 0

    rows = _lines(path / "timeseries.jsonl", StepRow)
    assert [r.step for r in rows] == list(range(8))
    last = rows[-1]
    assert last.messages_total == report.messages_processed
    assert sum(r.messages for r in rows) == report.messages_processed - 4  # 4 introductions
    assert last.tokens_stored == report.tokens_stored
    assert sum(r.tokens_saved for r in rows) == report.tokens_saved
    assert sum(r.insights_shared for r in rows) == report.insights_shared
    assert (last.facts_told, last.facts_known_agents) == (report.facts_planted, 4)
    assert last.facts_known_mean == report.facts_known_after_sharing
    assert last.facts_known_min <= last.facts_known_median <= last.facts_known_max
    assert rows[0].facts_known_mean < last.facts_known_mean  # the facts spread
    assert all(r.memory_ops > 0 and r.memory_p50_ms <= r.memory_p99_ms for r in rows)
    assert all(r.llm_calls == 0 for r in rows)
    # The turns' time splits into memory, model and the rest; no model here.
    assert 0 < report.memory_share <= 1 and report.llm_share == 0
    assert report.memory_share == round(report.memory_seconds / report.turn_seconds, 4)


async def test_a_stopped_run_writes_a_partial_directory(tmp_path: Path) -> None:
    stop = anyio.Event()

    def on_step(done: int) -> None:
        if done == 2:
            stop.set()

    run_dir = RunDir.create(tmp_path, "stopped")
    await run_simulation(_config(1_000), on_step=on_step, stop=stop, run_dir=run_dir)
    path = tmp_path / "stopped"
    info = json.loads((path / "run.json").read_text())
    assert (info["status"], info["partial"], info["steps_completed"]) == ("stopped", True, 2)
    assert json.loads((path / "report.json").read_text())["partial"] is True
    assert [r.step for r in _lines(path / "timeseries.jsonl", StepRow)] == [0, 1]


async def test_a_failed_run_records_its_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = f"failing_brain_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{module}.py").write_text(
        "async def step(turn):\n    if turn.step == 1:\n        raise KeyError('boom')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    brain = BrainConfig(kind="python", callable=f"{module}:step")
    run_dir = RunDir.create(tmp_path, "failed")
    with pytest.raises(BrainError):
        await run_simulation(_config(3, brain=brain), run_dir=run_dir)
    path = tmp_path / "failed"
    info = json.loads((path / "run.json").read_text())
    assert info["status"] == "failed" and "KeyError: 'boom'" in info["error"]
    assert not (path / "report.json").exists()
    failures = [e for e in _lines(path / "events.jsonl", Event) if e.kind == "failure"]
    assert failures and failures[0].step == 1 and "boom" in (failures[0].error or "")
    assert [r.step for r in _lines(path / "timeseries.jsonl", StepRow)] == [0]


async def test_an_llm_run_records_its_model_calls_and_memory_tools(tmp_path: Path) -> None:
    with OpenAIStub(reply=town_model) as server:
        run_dir = RunDir.create(tmp_path, "llm")
        config = llm_config(server)
        config = msgspec.structs.replace(
            config, simulation=msgspec.structs.replace(config.simulation, steps=1)
        )
        report = await run_simulation(config, run_dir=run_dir)
    path = tmp_path / "llm"
    rows = _lines(path / "timeseries.jsonl", StepRow)
    assert sum(r.llm_calls for r in rows) == report.llm_calls == server.requests
    assert sum(r.llm_tokens_in for r in rows) == report.llm_tokens_in
    assert all(r.llm_mean_ms > 0 for r in rows)
    tools = {e.tool for e in _lines(path / "events.jsonl", Event) if e.kind == "tool_call"}
    assert {"record_to_memory", "retrieve_from_memory", "talk_to", "share_insight"} <= tools
    assert 0 < report.llm_share < 1 and 0 < report.memory_share < 1
    assert [p.name for p in draw_plots(path)] == list(PLOTS)


def test_a_resumed_run_id_gets_a_directory_of_its_own(tmp_path: Path) -> None:
    first = RunDir.create(tmp_path, "town")
    (first.path / "run.json").write_text("{}")
    first.close()
    second = RunDir.create(tmp_path, "town")
    second.close()
    assert (first.path.name, second.path.name) == ("town", "town.1")


_SMALL = ["simulate", "--transport", "local", "--agents", "2", "--steps", "2", "--no-progress"]


def test_plot_draws_the_pngs_into_the_run_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*_SMALL, "--run-id", "plotted", "--runs-dir", str(tmp_path), "--plot"]) == 0
    out = capsys.readouterr().out
    assert f"run directory written: {tmp_path / 'plotted'}" in out
    for name in PLOTS:
        assert (tmp_path / "plotted" / name).read_bytes().startswith(_PNG), name


def test_the_runs_dir_comes_from_the_environment_and_no_run_dir_writes_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACTORMEM_RUNS_DIR", str(tmp_path))
    assert main([*_SMALL, "--run-id", "from-env"]) == 0
    assert json.loads((tmp_path / "from-env" / "run.json").read_text())["status"] == "finished"
    assert main([*_SMALL, "--run-id", "none", "--no-run-dir"]) == 0
    assert not (tmp_path / "none").exists()


def test_plot_without_matplotlib_is_one_line_and_the_run_succeeds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    assert main([*_SMALL, "--run-id", "bare", "--runs-dir", str(tmp_path), "--plot"]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "plots" in line]
    assert err == ["no plots: plots need matplotlib: pip install 'actormem[plots]' "
                   "(or pip install matplotlib)"]  # fmt: skip
    assert (tmp_path / "bare" / "report.json").exists()
    assert not list((tmp_path / "bare").glob("*.png"))


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--runs-dir", "{file}"], "cannot write the run directory under {file}: it is a file"),
        (
            ["--runs-dir", "{file}/runs"],
            "cannot write the run directory under {file}/runs: {file} is not a directory",
        ),
        (["--json", "{tmp}"], "cannot write the report to {tmp}: it is a directory"),
        (["--no-run-dir", "--plot"], "--plot draws into the run directory"),
    ],
)
def test_bad_output_paths_are_refused_before_anything_runs(
    args: list[str], expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "a-file"
    file.write_text("")
    paths = {"file": str(file), "tmp": str(tmp_path)}
    argv = [*_SMALL, "--runs-dir", str(tmp_path / "runs"), *(a.format(**paths) for a in args)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected.format(**paths) in err[0], err
    assert not (tmp_path / "runs").exists()  # no run began: no directory, no run id
