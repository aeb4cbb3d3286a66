"""Scenarios as data: the town file is the built-in town, a bad scenario is one line
before anything runs, relations shape who talks to whom, a rumour spreads by word
of mouth only, and the goal questions are scored through search and retrieve."""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from actormem.actors import AppConfig, MemoryRuntime
from actormem.actors.app.simulation import agent_names, plant_facts, run_simulation
from actormem.actors.app.simulation.display import print_report
from actormem.actors.app.simulation.scenario import (
    Population,
    Relations,
    Scenario,
    cast_scenario,
    check_scenario,
    load_scenario,
    town_scenario,
)
from actormem.actors.app.simulation.town import JOBS
from actormem.actors.config import BrainConfig, SimulationConfig, load_app_config
from actormem.runtime import RuntimeConfig, Transport
from actormem.runtime.cli import main
from actormem.runtime.errors import ConfigError
from tests.support import ROOT

pytestmark = pytest.mark.anyio

SCENARIOS = ROOT / "configs" / "scenarios"

#: Three villagers; Ada alone is told the secret, and nobody passes news on.
_SECRET = """
[[people]]
name = "Ada"
persona = "baker"
[[people]]
name = "Bram"
persona = "smith"
[[people]]
name = "Cleo"
persona = "fisher"

[relations]
rule = "none"
edges = [["Ada", "Bram"], ["Bram", "Cleo"]]

[[facts.planted]]
agent = "Ada"
step = 0
statement = "Remember this: the cellar key hangs behind the blue door."
query = "cellar key"
answer = "behind the blue door"

[[questions]]
question = "Where does the cellar key hang?"
answer = "Behind the BLUE door"
[[questions]]
question = "Where does the cellar key hang?"
answer = "behind the blue door"
ask = ["Bram", "Cleo"]
k = 3
[[questions]]
question = "Who won the rowing race?"
answer = "Edda"
"""


def _config(scenario: Path, **simulation: object) -> AppConfig:
    settings: dict[str, object] = {"agents": 3, "steps": 3, "fact_steps": 1, "share_facts": 0}
    return AppConfig(
        runtime=RuntimeConfig(transport="local"),
        simulation=SimulationConfig(scenario=str(scenario), **settings | simulation),  # type: ignore[arg-type]
    )


def _write(tmp_path: Path, text: str, name: str = "scenario.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_town_file_is_the_built_in_town_for_any_seed() -> None:
    assert load_scenario(SCENARIOS / "town.toml") == town_scenario()
    sim = SimulationConfig(agents=30, seed=11, facts_per_agent=3, fact_steps=5)
    cast = cast_scenario(town_scenario(), sim)
    names = agent_names(30)
    assert cast.names == names and names[26] == "Ada2"
    assert [cast.personas[n] for n in names] == [JOBS[i % len(JOBS)] for i in range(30)]
    assert [f for n in names for f in cast.facts[n]] == plant_facts(names, 3, 11)
    assert cast.relations == {}  # everyone talks to everyone
    # One fact a step within the first five, the same one again where three fall short.
    first, second, third = cast.facts["Ada"]
    told = [cast.told_at("Ada", step, 5) for step in range(6)]
    assert told == [[first], [first], [second], [second], [third], []]
    assert cast.system("Ada") == "You are Ada, the town's baker. Speak plainly."


def test_configs_name_their_scenario_relative_to_themselves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    town = load_app_config(ROOT / "configs" / "town.toml").simulation.scenario
    assert Path(town) == SCENARIOS / "town.toml"
    (tmp_path / "sub").mkdir()
    _write(tmp_path / "sub", _SECRET, "secret.toml")
    config = _write(tmp_path, '[simulation]\nscenario = "sub/secret.toml"\nagents = 3\n', "c.toml")
    monkeypatch.chdir(ROOT)  # not where the config is
    loaded = load_app_config(config)
    assert Path(loaded.simulation.scenario) == tmp_path / "sub" / "secret.toml"
    assert check_scenario(loaded).names == ["Ada", "Bram", "Cleo"]


_BAD = [
    (None, "scenario file not found"),
    ("[talk\n", "not valid TOML"),
    ("[population]\nnames = ['A']\n[talk]\ncolour = 'red'\n", "unknown key 'talk.colour'"),
    ("description = 'no people'\n", "a scenario needs [[people]] or a [population] rule"),
    (
        _SECRET.replace('agent = "Ada"', 'agent = "Zed"'),
        "key 'facts.planted[0].agent': no agent named 'Zed'",
    ),
    (
        _SECRET.replace("step = 0", "step = 3"),
        "key 'facts.planted[0].step': step 3 is out of range: the run has 3 steps "
        "(run at least 4: --steps 4)",
    ),
    (_SECRET.replace('ask = ["Bram", "Cleo"]', 'ask = ["Bob"]'), "key 'questions[1].ask'"),
    (_SECRET.replace('["Bram", "Cleo"]]', '["Bram", "Dora"]]'), "key 'relations.edges[1]'"),
    ("[[people]]\nname = 'Ada'\n", "key 'people': 1 people listed but simulation.agents is 3"),
    ("[population]\nnames = ['A']\n[relations]\nrule = 'ring'\nk = 3\n", "key 'relations'"),
    (
        "[population]\nnames = ['A']\n[facts.generate]\nthings = ['x']\nquery = '{where}'\n",
        "key 'facts.generate': query '{where}' may use only {thing}, {place}, {answer}",
    ),
    (
        _SECRET.replace('answer = "behind the blue door"\n\n', 'answer = "under the mat"\n\n'),
        "key 'facts.planted[0]': answer 'under the mat' is not in the statement",
    ),
    ("[population]\nnames = ['A']\n[talk]\ntell_news = 0.5\n", "tell_news needs a news_marker"),
]


_BAD_IDS = [
    "missing", "not-toml", "unknown-key", "no-people", "fact-agent", "fact-step",
    "question-agent", "edge-agent", "people-count", "odd-k", "template", "answer-unsaid",
    "news-unmarked",
]  # fmt: skip


@pytest.mark.parametrize(("text", "expected"), _BAD, ids=_BAD_IDS)
def test_a_bad_scenario_is_one_line_naming_file_and_key_before_anything_runs(
    text: str | None, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.toml" if text is None else _write(tmp_path, text, "bad.toml")
    args = ["simulate", "--transport", "local", "--agents", "3", "--steps", "3"]
    assert main([*args, "--scenario", str(path), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    # One line, and no run was started (a run says its id first).
    assert len(err) == 1 and str(path) in err[0] and expected in err[0], err


def test_relations_rules_link_agents_both_ways() -> None:
    names = [f"A{i}" for i in range(10)]
    sim = SimulationConfig(agents=10, seed=3)

    def links(relations: Relations) -> dict[str, tuple[str, ...]]:
        scenario = Scenario(population=Population(names=tuple(names)), relations=relations)
        return cast_scenario(scenario, sim).relations

    ring = links(Relations(rule="ring", k=4))
    assert ring["A0"] == ("A1", "A2", "A8", "A9")
    small = links(Relations(rule="small-world", k=4, rewire=0.5))
    assert small == links(Relations(rule="small-world", k=4, rewire=0.5))  # seeded
    assert small != ring
    for graph in (ring, small):
        assert all(a in graph[b] for a in names for b in graph[a])  # undirected
        assert sum(map(len, graph.values())) == 10 * 4  # rewiring keeps the edges
    assert links(Relations(rule="none", edges=(("A0", "A5"),)))["A5"] == ("A0",)
    with pytest.raises(ConfigError, match=r"key 'relations.k': a ring of 10 .* 10 agents"):
        links(Relations(rule="ring", k=10))


def test_people_come_first_and_a_population_makes_the_rest() -> None:
    text = "[[people]]\nname = 'Mayor'\npersona = 'mayor'\n[population]\nnames = ['Ann', 'Bo']\n"
    scenario = msgspec.toml.decode(text, type=Scenario)
    cast = cast_scenario(scenario, SimulationConfig(agents=4))
    assert cast.names == ["Mayor", "Ann", "Bo", "Ann2"]
    assert cast.personas["Mayor"] == "mayor" and cast.personas["Ann2"] == "townsperson"
    clash = msgspec.toml.decode(text.replace("'Mayor'", "'Ann'"), type=Scenario)
    with pytest.raises(ConfigError, match=r"key 'population\.names': makes 'Ann'"):
        cast_scenario(clash, SimulationConfig(agents=4), "s.toml")


async def test_goal_questions_are_scored_by_search_and_retrieve(
    tmp_path: Path,
    make_transport: Callable[[], Transport],
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = _config(_write(tmp_path, _SECRET))
    async with MemoryRuntime(config, transport=make_transport()) as rt:
        report = await run_simulation(config, runtime=rt)
    assert report.scenario == "scenario"
    anyone, asked_two, nobody = report.goals
    # Only Ada was told; nobody passes news on, and the pool carries nothing.
    assert (anyone.asked, anyone.by_search, anyone.by_retrieve, anyone.answered) == (3, 1, 1, 1)
    assert (asked_two.asked, asked_two.answered, asked_two.k) == (2, 0, 3)
    assert (nobody.asked, nobody.answered) == (3, 0)
    assert (report.goals_asked, report.goals_answered) == (8, 1)
    assert report.goals_answered_by_search == report.goals_answered_by_retrieve == 1
    print_report(report)
    out = capsys.readouterr().out
    assert "goal questions" in out and "1 (12%)" in out  # the total row: 1 of 8


async def test_every_agent_gets_its_relations(tmp_path: Path, user_relations: str) -> None:
    config = _config(
        _write(tmp_path, _SECRET),
        brain=BrainConfig(kind="python", callable=f"{user_relations}:Listener"),
    )
    await run_simulation(config)
    seen = importlib.import_module(user_relations).SEEN
    assert seen == {"Ada": ("Bram",), "Bram": ("Ada", "Cleo"), "Cleo": ("Bram",)}


@pytest.fixture
def user_relations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A user's brain noting each agent's relations, as built and as each turn has them."""
    name = f"relations_brain_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(
        "SEEN = {}\n"
        "class Listener:\n"
        "    def __init__(self, agent):\n"
        "        self.agent = agent\n"
        "    async def step(self, turn):\n"
        "        assert turn.relations == self.agent.relations\n"
        "        SEEN[turn.agent] = turn.relations\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


async def test_a_rumour_spreads_only_from_speaker_to_listener_along_relations() -> None:
    config = load_app_config(ROOT / "configs" / "rumour.toml")
    config = msgspec.structs.replace(config, runtime=RuntimeConfig(transport="local"))
    cast = check_scenario(config)
    async with MemoryRuntime(config) as rt:
        report = await run_simulation(config, runtime=rt)
        heard: dict[str, set[str]] = {}
        knows: set[str] = set()
        for name in cast.names:
            history = await rt.memory(name).get(scope="history")
            heard[name] = {m.name or "" for m in history if m.role == "agent_call"}
            if any("third oak on Gull Hill" in m.text() for m in history):
                knows.add(name)
    assert report.scenario == "rumour" and report.facts_planted == 2
    assert report.insights_shared == 0 and report.insights_delivered == 0  # no pool
    for name in cast.names:  # spoken to only by its relations
        assert heard[name] <= set(cast.relations[name]), name
    # Those who know the silver rumour are linked to Agnes, who was told it,
    # through others who know it.
    reached, frontier = {"Agnes"}, ["Agnes"]
    while frontier:
        for other in cast.relations[frontier.pop()]:
            if other in knows and other not in reached:
                reached.add(other)
                frontier.append(other)
    assert reached == knows and len(knows) > 1
    silver, ferry = report.goals
    assert silver.asked == ferry.asked == 16
    assert 1 < silver.answered <= len(knows) and 1 <= ferry.answered < 16


def test_simulate_plays_the_rumour_config(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    args = ["simulate", str(ROOT / "configs" / "rumour.toml"), "--steps", "10"]
    assert main([*args, "--no-progress", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["scenario"] == "rumour" and data["goals_asked"] == 32
    assert data["config"]["simulation"]["scenario"].endswith("scenarios/rumour.toml")
