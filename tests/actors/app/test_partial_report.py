"""A simulation asked to stop reports on what it did, marked partial."""

from __future__ import annotations

import anyio
import pytest

from actormem.actors import AppConfig
from actormem.actors.app.simulation import report_dict, run_simulation
from actormem.actors.config import SimulationConfig
from actormem.runtime import RuntimeConfig

pytestmark = pytest.mark.anyio


def _config(steps: int) -> AppConfig:
    return AppConfig(
        runtime=RuntimeConfig(transport="local"),
        simulation=SimulationConfig(agents=3, steps=steps, fact_steps=2),
    )


async def test_a_stopped_run_takes_no_new_step_and_reports_every_agent() -> None:
    stop = anyio.Event()

    def on_step(done: int) -> None:
        if done == 3:
            stop.set()

    report = await run_simulation(_config(1_000), on_step=on_step, stop=stop)
    assert (report.partial, report.steps_completed, report.steps) == (True, 3, 1_000)
    assert [a.agent for a in report.per_agent] == ["Ada", "Bram", "Cleo"]
    assert report.messages_processed > 0
    data = report_dict(report)
    assert data["partial"] is True and data["steps_completed"] == 3


async def test_a_run_that_was_not_stopped_is_whole() -> None:
    report = await run_simulation(_config(3), stop=anyio.Event())
    assert (report.partial, report.steps_completed) == (False, 3)
    assert len(report.per_agent) == 3


async def test_a_run_stopped_before_it_began_takes_no_step() -> None:
    stop = anyio.Event()
    stop.set()
    report = await run_simulation(_config(5), stop=stop)
    assert (report.partial, report.steps_completed) == (True, 0)
