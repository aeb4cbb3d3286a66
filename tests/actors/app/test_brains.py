"""The three brains behind ``actormem simulate``: llm (against the loopback
OpenAI-compatible server), a user's own ``module:callable``, and bad brain specs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from rich.progress import Progress
from structlog.testing import capture_logs

from actormem.actors import AppConfig, LongTermConfig, MemoryRuntime, check_openai_messages
from actormem.actors.app.simulation import BrainError, LLMUsage, check_brain, run_simulation
from actormem.actors.app.simulation.display import ModelRateColumn
from actormem.actors.config import BrainConfig, SimulationConfig
from actormem.actors.messages import Message
from actormem.runtime import RuntimeConfig, Transport
from actormem.runtime.cli import main
from tests.support import ROOT
from tests.support.openai_server import OpenAIStub

pytestmark = pytest.mark.anyio

_STEP = re.compile(r"Step (\d+)\. You are (\w+), .* The others are (\w+)")


def _call(n: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f"call-{n}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def town_model(body: dict[str, Any]) -> str | dict[str, Any]:
    """A model that, on each step, calls every tool once, then says what it did."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return "I took my turn."
    step = _STEP.search(str(last.get("content", "")))
    if step is None or "tools" not in body:
        return "Good to hear from you."
    n, me, other = step.groups()
    return {
        "content": None,
        "tool_calls": [
            _call(1, "record_to_memory", {"content": [f"{me} met {other} at step {n}"]}),
            _call(2, "retrieve_from_memory", {"keywords": [other]}),
            _call(3, "talk_to", {"agent": other, "message": f"Hello {other}, step {n}."}),
            _call(4, "share_insight", {"insight": f"{me} was here at step {n}", "topic": "mill"}),
            _call(5, "talk_to", {"agent": "Nobody", "message": "hi"}),
            {"id": "call-6", "type": "function", "function": {"name": "talk_to", "arguments": "{"}},
            _call(7, "fly", {}),
        ],
    }


@pytest.fixture
def server() -> Iterator[OpenAIStub]:
    with OpenAIStub(reply=town_model) as stub:
        yield stub


def llm_config(server: OpenAIStub, transport: str = "local", **brain: Any) -> AppConfig:
    settings: dict[str, Any] = {"base_url": server.base_url, "model": "stub-model"}
    return AppConfig(
        runtime=RuntimeConfig(transport=transport),  # type: ignore[arg-type]
        longterm=LongTermConfig(mode="both"),  # type: ignore[arg-type]
        simulation=SimulationConfig(
            agents=2,
            steps=2,
            facts_per_agent=1,
            fact_steps=1,
            brain=BrainConfig(kind="llm", **settings | brain),
        ),
    )


def _tool_results(history: list[Message]) -> dict[str, list[str]]:
    results: dict[str, list[str]] = {}
    for m in history:
        if m.role == "tool" and m.name:
            results.setdefault(m.name, []).append(m.text())
    return results


async def test_an_llm_run_calls_tools_and_stores_them_on_both_transports(
    server: OpenAIStub, make_transport: Callable[[], Transport]
) -> None:
    config = llm_config(server)
    async with MemoryRuntime(config, transport=make_transport()) as rt:
        report = await run_simulation(config, runtime=rt)
        ada = await rt.memory("Ada").get(scope="history")
        bram = await rt.memory("Bram").get(scope="history")
        context = await rt.memory("Ada").context(4_096)
    assert (report.brain, report.steps_completed, report.runtime.failures) == ("llm", 2, 0)
    # Per agent and step: the tool round, the round after it, and one answer to a call.
    assert report.llm_calls == server.requests == 2 * 2 * 3
    assert report.llm_tokens_in == 100 * server.requests
    tools = {t["function"]["name"] for t in server.bodies[0]["tools"]}
    assert tools == {
        "record_to_memory",
        "retrieve_from_memory",
        "context_reload",
        "talk_to",
        "share_insight",
    }
    # The first step's prompt is the agent's context(): its persona and the planted fact.
    prompts = ["\n".join(str(m.get("content")) for m in b["messages"]) for b in server.bodies]
    first = next(p for p in prompts if "Step 0. You are Ada" in p)
    assert "You are Ada, the town's baker" in first and "Remember this:" in first
    results = _tool_results(ada)
    assert results["record_to_memory"][0].startswith("Recorded 1 item(s)")
    assert "Ada met Bram at step 0" in results["retrieve_from_memory"][0]
    # A bad call gets an error the model can read; the step goes on.
    nobody = "error: Ada cannot speak to 'Nobody': no agent of that name"
    talks = results["talk_to"]
    assert talks[0::3] == ["Bram answered: Good to hear from you."] * 2
    assert talks[1::3] == [nobody] * 2
    assert talks[2::3] == ["error: the arguments are not JSON: {"] * 2
    assert results["fly"] == ["error: there is no tool named 'fly'"] * 2
    assert results["share_insight"][0] == "shared (new)"
    assert [m.text() for m in ada if m.role == "assistant" and not m.tool_calls] == [
        "I took my turn."
    ] * 2
    calls = [(m.role, m.name, m.text()) for m in bram if m.role.startswith("agent_")]
    assert ("agent_call", "Ada", "Hello Bram, step 0.") in calls
    assert ("agent_response", "Bram", "Good to hear from you.") in calls
    assert report.insights_shared == 4
    check_openai_messages(context)
    # The model's and the memory's waits are parts of the turns' time.
    assert 0 < report.llm_seconds < report.turn_seconds
    assert report.memory_seconds > 0


async def test_429_and_500_answers_are_retried_honouring_retry_after(
    server: OpenAIStub,
) -> None:
    server.retry_after = "0.05"
    server.script("429", "500")
    config = llm_config(server, max_retries=2, backoff_base=5.0)
    with capture_logs() as logs:
        report = await run_simulation(config)
    waits = [e["wait_s"] for e in logs if e["event"] == "llm_retry"]
    assert waits == [0.05, 0.05]  # the header's, not backoff_base's
    assert report.llm_retries == 2
    assert report.llm_calls == server.requests == 2 * 2 * 3 + 2
    assert report.steps_completed == 2


async def test_a_retry_after_past_the_cap_waits_the_cap(server: OpenAIStub) -> None:
    server.retry_after = "600"
    server.script("429")
    with capture_logs() as logs:
        await run_simulation(llm_config(server, backoff_cap=0.05))
    assert [e["wait_s"] for e in logs if e["event"] == "llm_retry"] == [0.05]


async def test_a_model_failing_for_good_ends_the_run_with_one_error(server: OpenAIStub) -> None:
    server.mode = "500"
    failed = r"stub-model.*failed: 3 attempts \(raise --max-retries\); last: Internal"
    with pytest.raises(BrainError, match=failed):
        await run_simulation(llm_config(server, max_retries=2, backoff_base=0.01))
    server.mode = "garbage"
    requests = server.requests
    with pytest.raises(BrainError, match="failed: JSONDecodeError"):
        await run_simulation(llm_config(server, max_retries=2, max_in_flight=1))
    assert server.requests - requests == 1  # the first request, never retried


async def test_the_progress_display_reads_the_model_calls_as_they_happen(
    server: OpenAIStub,
) -> None:
    usage = LLMUsage()
    progress = Progress(ModelRateColumn(usage), disable=True)
    progress.add_task("simulating", total=2, unit="steps")
    before = str(progress.columns[0].render(progress.tasks[0]))  # type: ignore[union-attr]
    report = await run_simulation(llm_config(server), llm_usage=usage)
    after = str(progress.columns[0].render(progress.tasks[0]))  # type: ignore[union-attr]
    assert before.startswith("0 model calls")
    assert usage.calls == report.llm_calls == 12
    assert re.fullmatch(r"12 model calls, [\d.,]+/s, [\d,]+ tokens/s", after), after


async def test_a_stopped_llm_run_gives_a_partial_report(server: OpenAIStub) -> None:
    stop = anyio.Event()
    server.delay = 0.05

    def on_step(done: int) -> None:
        stop.set()

    config = llm_config(server)
    config = msgspec.structs.replace(
        config, simulation=msgspec.structs.replace(config.simulation, steps=50)
    )
    report = await run_simulation(config, on_step=on_step, stop=stop)
    assert (report.partial, report.steps_completed) == (True, 1)
    assert report.llm_calls == server.requests >= 2 * 3


def test_the_llm_brain_runs_from_the_command_line(
    server: OpenAIStub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report.json"
    args = ["simulate", "configs/town.toml", "--transport", "local", "--agents", "2"]
    args += ["--steps", "1", "--brain", "llm", "--base-url", server.base_url, "--model", "m"]
    assert main([*args, "--no-progress", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert (report["brain"], report["llm_calls"]) == ("llm", server.requests)
    assert server.bodies[0]["model"] == "m"
    out = capsys.readouterr().out
    assert "model calls" in out
    assert re.search(r"turn time spent on .*\d+% memory, \d+% pool, \d+% model", out), out


@pytest.mark.slow
@pytest.mark.parametrize("extra", [[], ["--workers", "2"]], ids=["embedded-redis", "workers"])
def test_the_town_runs_on_an_llm_as_the_readme_says(
    server: OpenAIStub, tmp_path: Path, extra: list[str]
) -> None:
    out = tmp_path / "report.json"
    command = [sys.executable, "-m", "actormem.runtime.cli", "simulate", "configs/town.toml"]
    command += ["--brain", "llm", "--base-url", server.base_url, "--model", "NAME"]
    command += ["--agents", "3", "--steps", "2", "--json", str(out), *extra]
    proc = subprocess.run(
        command,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert (report["transport"], report["brain"], report["steps_completed"]) == ("redis", "llm", 2)
    assert report["llm_calls"] == server.requests == 3 * 2 * 3
    assert report["runtime"]["failures"] == 0
    tools = {t["function"]["name"] for t in server.bodies[0]["tools"]}
    assert {"record_to_memory", "retrieve_from_memory"} <= tools  # town.toml: mode both


_FUNCTION_BRAIN = """
async def step(turn):
    other = turn.rng.choice(turn.others)
    await turn.speak(other, f"{turn.agent} says hi at step {turn.step}")
"""

_CLASS_BRAIN = """
class Parrot:
    def __init__(self, agent):
        self.agent = agent

    async def step(self, turn):
        await turn.share(f"{turn.agent} the {self.agent.persona} was here", "mill")
        await turn.speak(turn.others[0], "squawk")

    async def respond(self, turn, caller, said):
        return f"{turn.agent} repeats: {said}"


class Mute(Parrot):
    async def respond(self, turn, caller, said):
        return None


class Broken(Parrot):
    async def step(self, turn):
        if turn.step == 1:
            raise KeyError("boom")


class Unbuildable(Parrot):
    def __init__(self, agent):
        raise ValueError(f"no brain for {agent.name}")
"""


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module of the user's brains, importable under a name no other test uses."""
    name = f"user_brains_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(_FUNCTION_BRAIN + _CLASS_BRAIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def python_config(spec: str) -> AppConfig:
    return AppConfig(
        runtime=RuntimeConfig(transport="local"),
        simulation=SimulationConfig(
            agents=3, steps=2, fact_steps=1, brain=BrainConfig(kind="python", callable=spec)
        ),
    )


async def test_a_user_function_drives_the_agents(user_module: str) -> None:
    config = python_config(f"{user_module}:step")
    async with MemoryRuntime(config) as rt:
        report = await run_simulation(config, runtime=rt)
        said = [
            m.text()
            for n in ("Ada", "Bram", "Cleo")
            for m in await rt.memory(n).get(scope="history")
            if m.role == "agent_call"
        ]
    assert report.brain == f"python:{user_module}:step"
    assert sorted(s for s in said if "step 1" in s) == [
        "Ada says hi at step 1",
        "Bram says hi at step 1",
        "Cleo says hi at step 1",
    ]
    assert report.llm_calls == 0


async def test_a_user_brain_class_is_built_per_agent_and_answers(user_module: str) -> None:
    config = python_config(f"{user_module}:Parrot")
    async with MemoryRuntime(config) as rt:
        report = await run_simulation(config, runtime=rt)
        ada = await rt.memory("Ada").get(scope="history")
    assert ("user", "Bram", "Bram repeats: squawk") in [(m.role, m.name, m.text()) for m in ada]
    assert report.insights_shared == 3  # the same words again are duplicates


async def test_a_brain_breaking_the_protocol_ends_the_run_naming_it(user_module: str) -> None:
    with pytest.raises(BrainError, match="the brain of Bram answered Ada with a NoneType"):
        await run_simulation(python_config(f"{user_module}:Mute"))


async def test_a_user_brain_raising_ends_the_run_naming_the_agent_and_step(
    user_module: str,
) -> None:
    with pytest.raises(BrainError, match=r"the brain of \w+ failed at step 1: KeyError: 'boom'"):
        await run_simulation(python_config(f"{user_module}:Broken"))
    with pytest.raises(BrainError, match="building the brain of Ada failed: ValueError: no brain"):
        await run_simulation(python_config(f"{user_module}:Unbuildable"))


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("no_such_module_here:step", "no module named 'no_such_module_here'"),
        ("json:nothing", "module json has no 'nothing'"),
        ("json:dumps", "expected an async function step(turn), or a class"),
        ("json:JSONDecoder", "whose instances have an async step(turn); got type JSONDecoder"),
    ],
)
def test_a_bad_user_brain_is_refused_before_the_run(
    spec: str, expected: str, user_module: str
) -> None:
    config = python_config(spec.format(module=user_module))
    with pytest.raises(BrainError) as refused:
        check_brain(config)
    assert expected in str(refused.value)


def test_a_step_function_taking_two_arguments_is_the_wrong_shape(
    tmp_path: Path, user_module: str
) -> None:
    (tmp_path / f"{user_module}_two.py").write_text("async def step(turn, extra):\n    pass\n")
    with pytest.raises(BrainError, match=r"it must take one argument \(turn\)"):
        check_brain(python_config(f"{user_module}_two:step"))


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--brain", "gpt"], "--brain: expected scripted, llm or module:callable, got 'gpt'"),
        (["--brain", "llm"], 'brain kind "llm" needs base_url and model'),
        (["--brain", "llm", "--base-url", "http://x/v1"], 'brain kind "llm" needs model'),
        (["--brain", "no_such_module_here:step"], "no module named 'no_such_module_here'"),
    ],
)
def test_a_bad_brain_on_the_command_line_is_one_line_before_the_run(
    args: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code = main(["simulate", "--transport", "local", *args])
    except SystemExit as exit:  # argparse's own one-line refusal
        code = exit.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0], err  # no "run <id>" line: nothing ran


def test_an_unknown_brain_kind_in_a_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[simulation.brain]\nkind = "gpt"\n')
    assert main(["simulate", str(bad)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"actormem: error: {bad}: key 'simulation.brain.kind': invalid value 'gpt'"
    )
