"""``bench simulation`` stopped between the two runs of a pair: the partial result keeps
the run that finished, alone, and the closing rows of the pairs before it; with
``--brain llm`` it runs against a loopback model and adds the runtime's own time per
model call."""

from __future__ import annotations

import argparse
from types import SimpleNamespace
from typing import Any

import pytest

from actormem.benchmarks import simulation
from actormem.benchmarks.__main__ import build_parser
from actormem.benchmarks._common import Recorder, recording
from tests.benchmarks.helpers import check_rows

pytestmark = pytest.mark.anyio


class _Stop(Exception):
    """Stands for the cancellation a signal brings."""


async def test_a_pair_stopped_halfway_keeps_its_finished_run(monkeypatch: Any) -> None:
    runs: list[str] = []

    async def fake_run(config: Any) -> Any:
        transport = config.runtime.transport
        runs.append(transport)
        if len(runs) == 4:  # pair 2's second run (redis first, then local)
            raise _Stop
        rate = 1000.0 if transport == "local" else 500.0
        return SimpleNamespace(
            messages_per_s=rate,
            messages_processed=10,
            facts_found=3,
            facts_found_by_search=2,
            facts_found_in_context=1,
            elapsed_s=0.01,
            llm_calls=0,
            own_ms_per_model_call_p50=0.0,
            own_ms_per_model_call_p99=0.0,
            compressions_queued_at_end=0,
        )

    monkeypatch.setattr(simulation, "run_simulation", fake_run)
    args = argparse.Namespace(config="configs/town.toml", seed=7, agents=[2], steps=1, runs=2)
    recorder = Recorder()
    with recording(recorder), pytest.raises(_Stop):
        await simulation.run(args)

    rows = recorder.finished()
    names = [row.name for row in rows]
    assert runs == ["local", "redis", "redis", "local"]
    assert names[0].startswith("simulation over Redis, pair 1")
    assert rows[0].ratio == pytest.approx(0.5)
    assert rows[0].extra["local"]["compressions_queued_at_end"] == 0
    assert "pair 2" in names[1] and "redis only" in names[1]
    assert rows[1].value == 500.0 and rows[1].ratio is None
    assert names[2].startswith("pairs whose two runs differ")
    assert rows[2].value == 0
    assert len(rows) == 3


@pytest.mark.slow
async def test_the_llm_brain_runs_against_a_loopback_model_with_its_own_time_rows() -> None:
    argv = ["simulation", "--brain", "llm", "--agents", "5", "--steps", "1", "--runs", "1"]
    options = ["--max-in-flight", "2", "--model-latency", "5"]
    rows = await simulation.run(build_parser().parse_args([*argv, *options]))
    check_rows("simulation", rows)
    own = [row for row in rows if row.name.startswith("runtime's own time per model call")]
    assert [row.name.split("(")[1] for row in own] == ["local, pair 1)", "redis, pair 1)"]
    # Per agent: the step, the round after its two tools, and the answer to its talk_to.
    assert all(row.value > 0 and row.extra["llm_calls"] == 5 * 3 for row in own)
    assert all(row.extra["cpu_ms_per_model_call"] > 0 for row in own)
    assert rows[-1].value == 0  # both runs processed the same messages, found the same facts
