"""How information spreads: for each fact, who knows it at each step and how (told by
the narrator, heard from an agent, received in a feed), the who-heard-from-whom
tree's depth and breadth, the steps to 50% and 90% of those who could know it, in
the time series, the report, the printed report and the plot."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from actormem.actors import AppConfig
from actormem.actors.app.simulation import run_simulation
from actormem.actors.app.simulation.brains import Turn
from actormem.actors.app.simulation.display import print_report
from actormem.actors.app.simulation.facts import FactIndex
from actormem.actors.app.simulation.plots import CURVES, draw_plots
from actormem.actors.app.simulation.rundir import RunDir
from actormem.actors.app.simulation.scenario import cast_scenario, load_scenario
from actormem.actors.app.simulation.spread import FactSpread, Spread, reach
from actormem.actors.app.simulation.timeline import StepRow
from actormem.actors.app.simulation.town import PlantedFact
from actormem.actors.config import BrainConfig, SimulationConfig
from actormem.actors.messages import Message
from actormem.actors.pool.insights import Insight
from actormem.runtime import RuntimeConfig

pytestmark = pytest.mark.anyio

#: Six villagers: Ada, Bram, Cleo and Dora in a line, Eve and Finn apart. Ada is
#: told the key's place at step 0, Eve the ferry's at step 0.
_VILLAGE = """
[[people]]
name = "Ada"
[[people]]
name = "Bram"
[[people]]
name = "Cleo"
[[people]]
name = "Dora"
[[people]]
name = "Eve"
[[people]]
name = "Finn"

[relations]
rule = "none"
edges = [["Ada", "Bram"], ["Bram", "Cleo"], ["Cleo", "Dora"], ["Eve", "Finn"]]

[[facts.planted]]
agent = "Ada"
statement = "Psst: the cellar key hangs behind the blue door."
query = "cellar key"
answer = "behind the blue door"

[[facts.planted]]
agent = "Eve"
statement = "Psst: the ferry leaves at dawn."
query = "ferry leaves"
answer = "at dawn"
"""
_CHAIN = ("Ada", "Bram", "Cleo", "Dora")


async def relay(turn: Turn) -> None:
    """At step i, the i-th of the line tells the next what it holds of the key; Eve
    shares the ferry with the pool at step 2, Ada the key at step 4."""
    await turn.flush()
    me = turn.agent
    if me in _CHAIN[:-1] and turn.step == _CHAIN.index(me) + 1:
        held = await turn.memory.search("cellar key")
        if held:
            await turn.speak(_CHAIN[_CHAIN.index(me) + 1], held[0].text())
    if me == "Eve" and turn.step == 2:
        await turn.share("Psst: the ferry leaves at dawn.", "ferry")
    if me == "Ada" and turn.step == 4:
        await turn.share("Psst: the cellar key hangs behind the blue door.", "key")


def _village(tmp_path: Path, **simulation: object) -> AppConfig:
    scenario = tmp_path / "village.toml"
    scenario.write_text(_VILLAGE)
    settings: dict[str, object] = {
        "agents": 6,
        "steps": 7,
        "fact_steps": 1,
        "share_facts": 0,
        "gossip_rate": 0.0,
        "run_id": "village",
        "brain": BrainConfig(kind="python", callable=f"{__name__}:relay"),
    }
    return AppConfig(
        runtime=RuntimeConfig(transport="local"),
        simulation=SimulationConfig(scenario=str(scenario), **settings | simulation),  # type: ignore[arg-type]
    )


def _rows(run: Path) -> list[StepRow]:
    decoder = msgspec.json.Decoder(StepRow)
    return [decoder.decode(line) for line in (run / "timeseries.jsonl").read_bytes().splitlines()]


def _counts(row: StepRow, fact: int) -> tuple[int, int, int, int]:
    (f,) = [f for f in row.spread if f.fact == fact]
    return f.known, f.by_narrator, f.by_agent, f.by_feed


async def test_a_rumour_passed_along_a_line_and_through_the_pool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = await run_simulation(_village(tmp_path), run_dir=RunDir.create(tmp_path, "village"))
    rows = _rows(tmp_path / "village")
    assert [r.step for r in rows] == list(range(7))
    # The key (fact 0): one more agent a step down the line, each heard from the one
    # before; then the pool takes it to Eve and Finn.
    key = [_counts(r, 0) for r in rows[:4]]
    assert key == [(1, 1, 0, 0), (2, 1, 1, 0), (3, 1, 2, 0), (4, 1, 3, 0)]
    assert _counts(rows[-1], 0) == (6, 1, 3, 2)
    assert all(f.could == 6 for r in rows for f in r.spread)  # the agents share: all could
    # The ferry (fact 1): Eve alone until she shares it; then everyone else by feed.
    assert _counts(rows[0], 1) == (1, 1, 0, 0)
    assert _counts(rows[-1], 1) == (6, 1, 0, 5)

    spread = report.spread
    assert spread is not None
    assert (spread.agents_measured, spread.sampled, spread.facts, spread.facts_measured) == (
        6,
        False,
        2,
        2,
    )
    key_report, ferry = spread.per_fact
    assert (key_report.fact, key_report.agent, key_report.answer, key_report.step) == (
        0,
        "Ada",
        "behind the blue door",
        0,
    )
    assert (key_report.known, key_report.by_narrator, key_report.by_agent) == (6, 1, 3)
    # Ada -> Bram -> Cleo -> Dora, and Ada -> Eve, Finn: three levels below Ada, the
    # widest (Bram, Eve, Finn) of three; half of six know it at step 2.
    assert (key_report.depth, key_report.breadth, key_report.steps_to_half) == (3, 3, 2)
    assert key_report.steps_to_90 is not None and key_report.steps_to_90 >= 4
    assert (ferry.depth, ferry.breadth, ferry.by_feed) == (1, 5, 5)
    assert ferry.steps_to_90 is not None and 2 <= ferry.steps_to_90 == ferry.steps_to_half
    assert (spread.reached_half, spread.reached_90) == (2, 2)
    assert (spread.depth_median, spread.breadth_median) == (2, 4)
    assert spread.known_share_median == 1.0
    assert spread.steps_to_half_median == (2 + ferry.steps_to_half) / 2

    print_report(report)
    out = capsys.readouterr().out
    assert "how the facts spread (6 agents measured)" in out
    assert "2 of 2 facts reached 50%, 2 reached 90%" in out


async def test_a_fact_spoken_to_a_neighbour_only(tmp_path: Path) -> None:
    # Two steps: Ada tells Bram at step 1; nobody shares yet.
    report = await run_simulation(
        _village(tmp_path, steps=2), run_dir=RunDir.create(tmp_path, "village")
    )
    rows = _rows(tmp_path / "village")
    assert _counts(rows[1], 0) == (2, 1, 1, 0)
    assert report.spread is not None
    key, ferry = report.spread.per_fact
    assert (key.known, key.by_agent, key.depth, key.breadth) == (2, 1, 1, 1)
    assert (key.steps_to_half, key.steps_to_90) == (None, None)
    assert (ferry.known, ferry.depth, ferry.breadth) == (1, 0, 1)
    assert report.spread.steps_to_half_median is None


def test_who_could_know_a_fact_follows_the_relations(tmp_path: Path) -> None:
    scenario = tmp_path / "village.toml"
    scenario.write_text(_VILLAGE)
    sim = SimulationConfig(agents=6, steps=2, share_facts=0, gossip_rate=0.0)
    cast = cast_scenario(load_scenario(scenario), sim)
    key, ferry = cast.facts["Ada"][0], cast.facts["Eve"][0]
    could = reach(cast, sim)
    assert could(key) == {"Ada", "Bram", "Cleo", "Dora"}
    assert could(ferry) == {"Eve", "Finn"}
    everyone = set(cast.names)
    # Sharing through the pool reaches every agent (all subscribe to every topic).
    assert reach(cast, msgspec.structs.replace(sim, share_facts=1))(key) == everyone
    assert reach(cast, msgspec.structs.replace(sim, gossip_rate=0.1))(key) == everyone
    python = BrainConfig(kind="python", callable="x:y")
    assert reach(cast, msgspec.structs.replace(sim, brain=python))(key) == everyone


def _fact(agent: str, answer: str) -> PlantedFact:
    return PlantedFact(agent, f"Psst: {answer}.", answer, answer, topic="t", step=0)


def _insight(source: str, text: str) -> Insight:
    return Insight(id="1", text=text, topic="t", importance=0.5, source=source, created=0.0)


def test_the_first_way_wins_and_a_sample_leaves_the_tree_out() -> None:
    fact = _fact("Ada", "under the bridge")
    facts = FactIndex([fact])
    said = "Psst: under the bridge."
    spread = Spread(["Ada", "Bram", "Cleo", "Dora"], ["Ada", "Bram", "Cleo"])
    assert spread.sampled
    spread.begin(0, facts)
    spread.heard("Ada", Message(role="user", name="narrator", content=said), {0})
    # Bram heard it from Ada, then got it in a feed too: the first way counts.
    spread.heard("Bram", Message(role="agent_call", name="Ada", content=said), {0})
    spread.fed("Bram", _insight("Ada", said), {0})
    # Cleo's own line (no narrator, no agent, no feed) is known some other way.
    spread.heard("Cleo", Message(role="assistant", name="Cleo", content=said), {0})
    assert spread.row() == [
        FactSpread(fact=0, could=3, known=3, by_narrator=1, by_agent=1, by_feed=0)
    ]
    report = spread.report()
    assert (report.sampled, report.agents_measured) == (True, 3)
    (only,) = report.per_fact
    assert (only.depth, only.breadth, only.steps_to_half, only.steps_to_90) == (None, None, 0, 0)
    assert (report.depth_median, report.breadth_median) == (None, None)


def test_a_feed_names_its_source_in_the_tree() -> None:
    fact = _fact("Ada", "under the bridge")
    spread = Spread(["Ada", "Bram", "Cleo"], ["Ada", "Bram", "Cleo"])
    spread.begin(3, FactIndex([fact]))
    spread.heard("Ada", Message(role="user", name="narrator", content="under the bridge"), {0})
    spread.row()
    spread.begin(4, FactIndex([fact]))
    spread.fed("Bram", _insight("Ada", "under the bridge"), {0})
    spread.heard("Cleo", Message(role="user", name="Bram", content="under the bridge"), {0})
    assert spread.row()[0].known == 3
    (only,) = spread.report().per_fact
    assert (only.by_feed, only.by_agent, only.depth, only.breadth) == (1, 1, 2, 1)
    assert (only.step, only.steps_to_half, only.steps_to_90) == (3, 1, 1)


def test_many_facts_are_drawn_as_a_median_and_bands(tmp_path: Path) -> None:
    # The plot reads only the time series (and, for labels, the report if any).
    run = tmp_path / "many"
    run.mkdir()
    row = StepRow(**dict.fromkeys(StepRow.__struct_fields__[:-1], 0))  # type: ignore[arg-type]
    rows = []
    for step in range(4):
        spread = [
            FactSpread(fact=i, could=10, known=min(10, 1 + step * i), by_narrator=1,
                       by_agent=0, by_feed=min(9, step * i))
            for i in range(CURVES + 2)
        ]  # fmt: skip
        rows.append(msgspec.structs.replace(row, step=step, facts_known_agents=10, spread=spread))
    (run / "timeseries.jsonl").write_bytes(b"".join(msgspec.json.encode(r) + b"\n" for r in rows))
    written = draw_plots(run)
    assert (run / "knowledge.png") in written
    assert (run / "knowledge.png").read_bytes().startswith(b"\x89PNG")
