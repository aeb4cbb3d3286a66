"""LLM brains at scale: rate limits ridden out together, an endpoint that does not
answer found at start, a failing brain named by file and line, run.json agreeing
with the time series, and the runtime's own time per model call in the report."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from structlog.testing import capture_logs

from actormem.actors.app.simulation import BrainError, SimulationReport, run_simulation
from actormem.actors.app.simulation.brains.llm_client import LLMClient, model_wait
from actormem.actors.app.simulation.brains.pacing import Pacing
from actormem.actors.app.simulation.display import print_report
from actormem.actors.app.simulation.rundir import RUN, TIMESERIES, RunDir
from actormem.actors.config import AppConfig, BrainConfig, SimulationConfig
from actormem.runtime import RuntimeConfig
from actormem.runtime.cli import main
from tests.actors.app.test_brains import llm_config, python_config, server, user_module
from tests.support import ROOT
from tests.support.openai_server import OpenAIStub

__all__ = ("server", "user_module")  # fixtures, used by name

pytestmark = pytest.mark.anyio


def _sized(config: AppConfig, **simulation: Any) -> AppConfig:
    return msgspec.structs.replace(
        config, simulation=msgspec.structs.replace(config.simulation, **simulation)
    )


# -- rate limits ---------------------------------------------------------------------


async def test_four_429s_in_a_row_for_one_call_are_ridden_out_by_default(
    server: OpenAIStub,
) -> None:
    server.script("429", "429", "429", "429")
    # One request at a time: the first call gets all four.
    report = await run_simulation(llm_config(server, max_in_flight=1))
    assert (report.steps_completed, report.llm_retries) == (2, 4)


async def test_a_run_fails_once_its_retry_budget_is_spent(server: OpenAIStub) -> None:
    server.script("429", "500", "429")
    config = llm_config(server, retry_budget=2, max_in_flight=1)
    with pytest.raises(BrainError, match=r"the run's retry budget of 2 is spent .* last: RateLim"):
        await run_simulation(config)


def test_a_429_halves_the_requests_in_flight_and_answers_raise_them_back() -> None:
    now = [0.0]
    pacing = Pacing(8, retry_budget=1, clock=lambda: now[0])
    pacing.rate_limited(sent_at=0.0, pause=None)
    assert pacing.in_flight_limit == 4
    now[0] = 1.0
    pacing.rate_limited(sent_at=0.0, pause=None)  # sent before the cut: no second cut
    assert pacing.in_flight_limit == 4
    pacing.rate_limited(sent_at=1.0, pause=None)
    assert pacing.in_flight_limit == 2
    limits = []
    for _ in range(2 + 3 + 4 + 5 + 6 + 7 + 3):
        pacing.answered()
        limits.append(pacing.in_flight_limit)
    assert limits.count(8) == 4 and max(limits) == 8
    assert [limits[i] for i in (1, 4, 8, 13, 19, 26)] == [3, 4, 5, 6, 7, 8]
    assert pacing.spend_retry() and not pacing.spend_retry()


async def test_a_retry_after_holds_every_request_until_it_is_over() -> None:
    pacing = Pacing(4, retry_budget=0)
    pacing.rate_limited(sent_at=time.monotonic(), pause=0.2)
    resume_at = time.monotonic() + pacing.paused_for
    sent: list[float] = []

    async def request() -> None:
        async with pacing.slot() as at:
            sent.append(at)

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(request)
    assert len(sent) == 3 and min(sent) >= resume_at - 0.001
    assert pacing.in_flight_limit == 2


@pytest.mark.slow
async def test_default_settings_ride_out_a_429_to_every_7th_request(server: OpenAIStub) -> None:
    server.rate_limit_every = 7
    report = await run_simulation(_sized(llm_config(server), agents=20, steps=15))
    assert report.steps_completed == 15
    assert report.llm_retries >= report.llm_calls // 7 - 1 > 0


def test_max_retries_on_the_command_line(
    server: OpenAIStub, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    server.script("429")
    args = ["simulate", "configs/town.toml", "--transport", "local", "--agents", "2"]
    args += ["--steps", "1", "--brain", "llm", "--base-url", server.base_url, "--model", "m"]
    args += ["--no-progress", "--runs-dir", str(tmp_path), "--max-in-flight", "1"]
    assert main([*args, "--max-retries", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith(
        "failed: 1 attempt (raise --max-retries); last: RateLimitError: Error code: 429 - stub 429"
    ), err
    assert "Traceback" not in "\n".join(err)
    server.script("429")
    assert main([*args, "--retry-budget", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "failed: the run's retry budget of 0 is spent (raise --retry-budget)" in err[-1], err
    with pytest.raises(SystemExit) as refused:
        main([*args, "--max-retries", "-1"])
    assert refused.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "actormem simulate: error: argument --max-retries: expected a whole number >= 0, got '-1' "
        "(see 'actormem simulate --help')"
    ]


# -- an endpoint that does not answer --------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.fixture
def silent() -> Iterator[str]:
    """The base URL of a server that takes connections and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield f"http://127.0.0.1:{s.getsockname()[1]}/v1"


def test_an_endpoint_refusing_connections_is_one_line_before_any_step(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    args = ["simulate", "configs/town.toml", "--transport", "local", "--no-progress"]
    args += ["--brain", "llm", "--base-url", url, "--model", "m", "--runs-dir", str(tmp_path)]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(
        f"actormem: error: the model endpoint {url} does not answer: ConnectError: "
    ), err
    assert len(err) == 2 and "Traceback" not in err[-1]  # the "run <id>" line, then it
    run = json.loads(next(tmp_path.glob(f"*/{RUN}")).read_text())
    assert (run["status"], run["steps_completed"]) == ("failed", 0)


async def test_an_endpoint_that_never_answers_is_found_within_the_connect_timeout(
    silent: str,
) -> None:
    brain = BrainConfig(kind="llm", base_url=silent, model="m", connect_timeout=0.2)
    config = AppConfig(
        runtime=RuntimeConfig(transport="local"),
        simulation=SimulationConfig(agents=2, steps=1, brain=brain),
    )
    with pytest.raises(BrainError, match=rf"endpoint {silent} does not answer: no answer within"):
        await run_simulation(config)


# -- run.json and the time series ----------------------------------------------------


_FAILING_AT_2 = """
async def step(turn):
    if turn.step == 2:
        raise ValueError("boom")
"""


async def test_a_failed_runs_run_json_counts_the_steps_whose_rows_were_written(
    user_module: str, tmp_path: Path
) -> None:
    (tmp_path / f"{user_module}_fails.py").write_text(_FAILING_AT_2)
    config = _sized(python_config(f"{user_module}_fails:step"), steps=5)
    run_dir = RunDir.create(tmp_path / "runs", "r")
    with pytest.raises(BrainError, match=r"failed at step 2: ValueError: boom"):
        await run_simulation(config, run_dir=run_dir)
    rows = (run_dir.path / TIMESERIES).read_text().splitlines()
    run = json.loads((run_dir.path / RUN).read_text())
    assert (run["status"], run["steps_completed"], len(rows)) == ("failed", 2, 2)


@pytest.mark.slow
def test_a_stopped_runs_run_json_counts_the_steps_whose_rows_were_written(
    tmp_path: Path,
) -> None:
    command = [sys.executable, "-m", "actormem", "simulate", "configs/town.toml", "--no-progress"]
    command += ["--transport", "local", "--steps", "1000", "--runs-dir", str(tmp_path)]
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
    )
    deadline = time.monotonic() + 60
    rows: list[Path] = []
    while time.monotonic() < deadline and proc.poll() is None:
        rows = list(tmp_path.glob(f"*/{TIMESERIES}"))
        if rows and len(rows[0].read_text().splitlines()) >= 2:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM
    run = json.loads((rows[0].parent / RUN).read_text())
    written = len(rows[0].read_text().splitlines())
    assert (run["status"], run["steps_completed"]) == ("stopped", written)
    assert written >= 2


# -- where a brain raised ------------------------------------------------------------


_RAISING = """
import json


async def step(turn):
    if turn.step == 1:
        raise ValueError("boom")


async def parses(turn):
    json.loads("{")
"""


async def test_a_brains_error_names_the_file_and_line_it_was_raised_at(
    user_module: str, tmp_path: Path
) -> None:
    name = f"{user_module}_raising"
    (tmp_path / f"{name}.py").write_text(_RAISING)
    with pytest.raises(BrainError) as failed:
        await run_simulation(python_config(f"{name}:step"))
    assert str(failed.value).endswith(f"failed at step 1: ValueError: boom ({name}.py:7)")
    # Raised inside the standard library: the user's line that called it.
    with pytest.raises(BrainError) as failed:
        await run_simulation(python_config(f"{name}:parses"))
    assert str(failed.value).endswith(f"({name}.py:11)")


def test_a_user_brain_raising_is_one_line_on_the_command_line(
    user_module: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = f"{user_module}_cli"
    (tmp_path / f"{name}.py").write_text(_RAISING)
    args = ["simulate", "configs/town.toml", "--transport", "local", "--agents", "2"]
    args += ["--steps", "3", "--brain", f"{name}:step", "--no-progress", "--no-run-dir"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("actormem: error: the brain of ")
    assert err[-1].endswith(f"failed at step 1: ValueError: boom ({name}.py:7)"), err


# -- the runtime's own time per model call -------------------------------------------


async def test_the_report_gives_the_runtimes_own_time_per_model_call(
    server: OpenAIStub, capsys: pytest.CaptureFixture[str]
) -> None:
    report = await run_simulation(llm_config(server))
    assert 0 < report.own_ms_per_model_call_p50 <= report.own_ms_per_model_call_p99
    assert "runtime's own time per model call" in _printed(report, capsys)
    scripted = AppConfig(
        runtime=RuntimeConfig(transport="local"), simulation=SimulationConfig(agents=2, steps=1)
    )
    assert (await run_simulation(scripted)).own_ms_per_model_call_p99 == 0.0


def _printed(report: SimulationReport, capsys: pytest.CaptureFixture[str]) -> str:
    print_report(report)
    return capsys.readouterr().out


async def test_a_turns_model_wait_counts_the_calls_of_the_tasks_it_starts(
    server: OpenAIStub,
) -> None:
    brain = llm_config(server).simulation.brain
    async with LLMClient(brain) as llm:
        with model_wait() as waited:
            async with anyio.create_task_group() as tg:
                for _ in range(2):
                    tg.start_soon(llm.complete, [{"role": "user", "content": "hi"}])
        await llm.complete([{"role": "user", "content": "not in the turn"}])
    assert waited.calls == 2 and waited.seconds > 0


@pytest.mark.slow
async def test_fifty_llm_agents_run_to_the_end_within_max_in_flight(server: OpenAIStub) -> None:
    config = _sized(llm_config(server, max_in_flight=4), agents=50, steps=2)
    report = await run_simulation(config)
    assert (report.steps_completed, report.llm_retries) == (2, 0)
    assert report.llm_calls == server.requests == 50 * 2 * 3
    assert server.peak_in_flight <= 4
    assert 0 < report.own_ms_per_model_call_p50 <= report.own_ms_per_model_call_p99


# -- a large run's log -----------------------------------------------------------------


async def test_an_llm_run_logs_no_line_per_agent_or_retry_above_debug(server: OpenAIStub) -> None:
    server.rate_limit_every = 5
    config = _sized(llm_config(server), agents=20, steps=3)
    compression = msgspec.structs.replace(config.compression, msg_threshold=12, last_keep=4)
    with capture_logs() as logs:
        report = await run_simulation(msgspec.structs.replace(config, compression=compression))
    assert report.llm_retries > 0 and report.compressions >= 20
    above_debug = Counter(e["event"] for e in logs if e["log_level"] != "debug")
    # The insight pool's own lines are left to the pool (one per subscription and share).
    per_agent = {event for event, n in above_debug.items() if n >= 20}
    assert per_agent <= {"pool_subscribed", "insight_shared"}, above_debug
    assert "llm_retry" not in above_debug, above_debug
