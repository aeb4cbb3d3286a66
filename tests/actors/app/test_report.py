"""The simulation report tells the truth: only told facts count as planted, reload
figures only when something was offloaded, the worst agents are the ones shown,
and the JSON says which run, version and config it is about."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import anyio
import msgspec
import pytest

from actormem.actors import AppConfig
from actormem.actors.app.simulation import run_simulation
from actormem.actors.app.simulation.display import print_report
from actormem.actors.compression import CompressionConfig
from actormem.actors.compression import actor as compressor
from actormem.actors.config import SimulationConfig
from actormem.actors.memory.handle import MemoryHandle
from actormem.runtime import RuntimeConfig
from actormem.runtime.cli import main

pytestmark = pytest.mark.anyio


def _config(**simulation: int) -> AppConfig:
    return AppConfig(
        runtime=RuntimeConfig(transport="local"),
        simulation=SimulationConfig(**simulation),  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("settings", "told_each"),
    [
        # Fewer steps than fact-telling steps: one fact each told, not three.
        ({"agents": 2, "steps": 2, "facts_per_agent": 3, "fact_steps": 5}, 1),
        # More facts than fact-telling steps: two of four told.
        ({"agents": 2, "steps": 4, "facts_per_agent": 4, "fact_steps": 2}, 2),
        # Every fact told.
        ({"agents": 2, "steps": 6, "facts_per_agent": 3, "fact_steps": 5}, 3),
    ],
)
async def test_only_facts_told_count_as_planted(settings: dict[str, int], told_each: int) -> None:
    report = await run_simulation(_config(**settings))
    assert report.facts_planted == 2 * told_each
    assert [a.facts for a in report.per_agent] == [told_each, told_each]
    assert report.facts_found_by_search == report.facts_planted  # what was told is kept


async def test_progress_moves_with_each_turn_and_each_agent_measured() -> None:
    seen: list[tuple[str, int, int]] = []
    await run_simulation(_config(agents=3, steps=2), on_progress=lambda *moved: seen.append(moved))
    assert [s for s in seen if s[0] == "turns"] == [("turns", n, 6) for n in range(1, 7)]
    assert [s for s in seen if s[0] == "measured"] == [("measured", n, 3) for n in (1, 2, 3)]


async def test_the_report_records_its_version_start_and_config() -> None:
    report = await run_simulation(_config(agents=2, steps=2))
    assert report.version and report.workers == 0
    assert datetime.fromisoformat(report.started_at).tzinfo is not None
    assert report.config["simulation"]["agents"] == 2
    assert report.config["runtime"]["transport"] == "local"


async def test_the_printed_report_shows_reload_only_after_compression_and_the_worst_agents(
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = await run_simulation(_config(agents=3, steps=6, fact_steps=5))
    assert report.compressions == 0 and report.facts_found == report.facts_planted
    ada, bram, cleo = report.per_agent
    report = msgspec.structs.replace(
        report,
        per_agent=[
            msgspec.structs.replace(ada, known_after_sharing=0.9),
            msgspec.structs.replace(bram, known_after_sharing=0.5),
            msgspec.structs.replace(cleo, found=cleo.facts - 1, known_after_sharing=0.9),
        ],
    )
    print_report(report)
    out = capsys.readouterr().out
    assert "found by reload" not in out
    # Cleo found the fewest of her own facts; then Bram knows the fewest facts at all.
    rows = [line.split("│")[1].strip() for line in out.splitlines() if line.count("│") == 6]
    assert rows == ["Cleo", "Bram", "Ada"]
    print_report(
        msgspec.structs.replace(
            report, compressions=3, workers=2, actor_failures=3, actor_restarts=1
        )
    )
    out = capsys.readouterr().out
    assert "found by reload" in out
    assert "3 / 1 (this process and 2 workers)" in out


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("missing/report.json", "no directory"),
        (".", "it is a directory"),
    ],
)
def test_a_bad_json_path_is_refused_before_the_run(
    where: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / where
    assert main(["simulate", "--transport", "local", "--json", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"cannot write the report to {path}: {expected}" in err[0], err


def test_the_json_of_a_run_records_its_workers_and_config(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    args = ["simulate", "--transport", "local", "--agents", "2", "--steps", "1"]
    assert main([*args, "--no-progress", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["workers"] == 0 and data["config"]["simulation"]["steps"] == 1


def _compressing(agents: int, steps: int, timeout: float = 60.0) -> AppConfig:
    """A run whose agents cross their compression budget within its steps."""
    compression = CompressionConfig(msg_threshold=20, max_tokens=1200, last_keep=6, timeout=timeout)
    return msgspec.structs.replace(_config(agents=agents, steps=steps), compression=compression)


def _never_compressing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compressors that never answer."""

    async def never(*args: object, **kwargs: object) -> object:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    monkeypatch.setattr(compressor, "compress", never)


async def test_the_run_waits_for_the_compressions_in_flight_when_its_steps_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every compression is held until the run has looked at each agent after its
    # last step: the report then counts them in flight, waits for them, and
    # measures views with none left queued.
    agents, steps = 3, 8
    held = anyio.Event()
    looked: list[bool] = []
    real_compress, real_stats = compressor.compress, MemoryHandle.stats

    async def compress(*args: object, **kwargs: object) -> object:
        await held.wait()
        return await real_compress(*args, **kwargs)  # type: ignore[arg-type]

    async def stats(self: MemoryHandle) -> object:
        out = await real_stats(self)
        if looked:  # the steps ended
            looked.append(out.compressing)
            if len(looked) > agents:
                held.set()
        return out

    monkeypatch.setattr(compressor, "compress", compress)
    monkeypatch.setattr(MemoryHandle, "stats", stats)

    def on_step(done: int) -> None:
        if done == steps:
            looked.append(True)

    report = await run_simulation(_compressing(agents, steps), on_step=on_step)
    assert report.compressions_in_flight_after_steps == agents  # every agent's round
    assert report.compressions_queued_at_end == 0
    assert report.compressions >= agents and report.compressions_wait_s >= 0
    assert report.peak_working_messages > 20  # nothing was compressed during the steps


async def test_a_stopped_run_does_not_wait_for_its_compressions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _never_compressing(monkeypatch)
    steps, stop = 8, anyio.Event()

    def on_step(done: int) -> None:
        if done == steps:
            stop.set()

    report = await run_simulation(_compressing(3, steps), on_step=on_step, stop=stop)
    assert report.partial
    assert report.compressions_in_flight_after_steps == report.compressions_queued_at_end == 3


async def test_the_wait_gives_up_when_no_compression_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The run waits while rounds end, so with none ending it gives up after twice
    # the compression timeout, and reports them queued.
    _never_compressing(monkeypatch)
    report = await run_simulation(_compressing(3, 8, timeout=0.05))
    assert not report.partial
    assert report.compressions_in_flight_after_steps == report.compressions_queued_at_end == 3
