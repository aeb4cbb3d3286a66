"""Scenarios: who the agents are, whom they talk to, what they are told and asked.

A scenario is a TOML file (``[simulation] scenario``, resolved relative to the
config file; ``actormem simulate --scenario PATH`` overrides it) holding:

- the people: explicit ``[[people]]`` (name, persona), then as many more as
  ``simulation.agents`` asks for from a ``[population]`` rule (a name pool and
  personas, cycled);
- the relations: who talks to whom (``[relations]``: ``everyone``, a ``ring`` or
  a ``small-world`` network of ``k`` neighbours, or ``none``, plus explicit
  ``edges``); the scripted brain picks its partners among them;
- the planted facts and when the narrator tells them: explicit
  ``[[facts.planted]]`` (agent, statement, query, answer, topic, step) and a
  ``[facts.generate]`` template like the town's;
- what the scripted brain talks about (``[talk]``: topics, places, tools, and
  how often it passes on news it holds);
- the goal questions asked at the end (``[[questions]]``), scored through
  ``search`` and ``retrieve`` (see :mod:`actormem.actors.app.simulation.goals`).

With no scenario set, a run plays the built-in town (:func:`town_scenario`, the
same as ``configs/scenarios/town.toml``). :func:`load_scenario` refuses a bad file,
and :func:`cast_scenario` a scenario that does not fit the run (a fact naming an
unknown agent, a step out of range), each with one :class:`ConfigError` naming the
file and the key.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

import msgspec

from actormem.actors.app.simulation import town
from actormem.actors.app.simulation.town import PlantedFact, agent_names, plant_facts
from actormem.actors.config import AppConfig, SimulationConfig
from actormem.runtime.config import ConfigSection, load_toml
from actormem.runtime.errors import ConfigError

__all__ = (
    "Cast",
    "Fact",
    "FactTemplate",
    "Facts",
    "Person",
    "Population",
    "Question",
    "RelationRule",
    "Relations",
    "Scenario",
    "Talk",
    "cast_scenario",
    "check_scenario",
    "load_scenario",
    "scenario_of",
    "town_scenario",
)

RelationRule = Literal["everyone", "ring", "small-world", "none"]
#: How many results of ``search`` and ``retrieve`` a goal question looks in by default.
DEFAULT_QUESTION_K: Final = 5
_SYSTEM: Final = "You are {name}, the town's {persona}. Speak plainly."
_REWIRE_TRIES: Final = 16
_PERSONA: Final = "townsperson"


def _filled(template: str, what: str, **values: str) -> None:
    """Refuse a template naming a placeholder other than ``values``'."""
    try:
        template.format(**values)
    except (KeyError, IndexError, ValueError) as exc:
        names = ", ".join("{" + k + "}" for k in values)
        raise ValueError(f"{what} {template!r} may use only {names} ({exc!r})") from None


def _not_empty(section: ConfigSection, *keys: str) -> None:
    for key in keys:
        if not getattr(section, key):
            raise ValueError(f"{key} must not be empty")


class Person(ConfigSection, frozen=True):
    """One agent named in the scenario (``[[people]]``)."""

    name: str
    persona: str = _PERSONA

    def __post_init__(self) -> None:
        _not_empty(self, "name")


class Population(ConfigSection, frozen=True):
    """The rule making the agents past the explicit people (``[population]``):
    agent ``i`` of them is ``names[i % len(names)]`` (numbered from the pool's
    second round on: ``Ada2``) and ``personas[i % len(personas)]``."""

    names: tuple[str, ...]
    personas: tuple[str, ...] = (_PERSONA,)

    def __post_init__(self) -> None:
        _not_empty(self, "names", "personas")
        if len(set(self.names)) != len(self.names):
            raise ValueError("names must be distinct")


class Relations(ConfigSection, frozen=True):
    """Who talks to whom (``[relations]``): undirected, the rule's edges plus ``edges``.

    Attributes:
        rule: ``everyone`` (each agent with every other), ``ring`` (each with the
            ``k`` nearest in the agents' order, ``k/2`` on each side),
            ``small-world`` (that ring, each edge rewired to a random agent with
            chance ``rewire``, seeded by the run's seed: Watts-Strogatz) or
            ``none`` (only ``edges``).
        k: neighbours in the ring (even, at least 2).
        rewire: the chance a small-world edge is rewired.
        edges: pairs of agents who also talk to each other.
    """

    rule: RelationRule = "everyone"
    k: int = 4
    rewire: float = 0.1
    edges: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        self._at_least(2, "k")
        if self.k % 2:
            raise ValueError(f"k must be even (k/2 neighbours on each side), got {self.k}")
        self._within(0.0, 1.0, "rewire")


class FactTemplate(ConfigSection, frozen=True):
    """Facts made like the town's (``[facts.generate]``): ``simulation.facts_per_agent``
    for each agent, a code for each pair of a thing and a place, told one a step
    within the first ``simulation.fact_steps`` steps (a fact's topic is its place)."""

    things: tuple[str, ...]
    places: tuple[str, ...] = ()
    statement: str = town.FACT_STATEMENT
    query: str = town.FACT_QUERY

    def __post_init__(self) -> None:
        _not_empty(self, "things")
        for key in ("statement", "query"):
            _filled(getattr(self, key), key, thing="t", place="p", answer="a")


class Fact(ConfigSection, frozen=True):
    """One planted fact (``[[facts.planted]]``), told to ``agent`` at ``step``."""

    agent: str
    statement: str
    query: str
    answer: str
    topic: str = "town"
    step: int = 0

    def __post_init__(self) -> None:
        _not_empty(self, "statement", "query", "answer")
        self._at_least(0, "step")
        if self.answer not in self.statement:
            raise ValueError(f"answer {self.answer!r} is not in the statement")


class Facts(ConfigSection, frozen=True):
    """The planted facts (``[facts]``): made from a template, listed, or both."""

    generate: FactTemplate | None = None
    planted: tuple[Fact, ...] = ()


class Talk(ConfigSection, frozen=True):
    """What the scripted brain talks about (``[talk]``).

    Attributes:
        topics, places: what its small talk is about, and where it saw it.
        tools: the (pretend) tools it calls.
        system: each agent's system message (``{name}``, ``{persona}`` filled in).
        tell_news: the share of turns in which a scripted agent tells its partner
            a piece of news it holds instead of small talk.
        news_marker: what marks a message as news: those in the agent's working
            memory containing it (a case-insensitive ``search``) are the news it
            holds, the narrator's planted facts and what others told it alike.
    """

    topics: tuple[str, ...] = town.TOPICS
    places: tuple[str, ...] = town.PLACES
    tools: tuple[str, ...] = town.TOOLS
    system: str = _SYSTEM
    tell_news: float = 0.0
    news_marker: str = ""

    def __post_init__(self) -> None:
        _not_empty(self, "topics", "places", "tools")
        _filled(self.system, "system", name="n", persona="p")
        self._within(0.0, 1.0, "tell_news")
        if self.tell_news and not self.news_marker:
            raise ValueError("tell_news needs a news_marker")


class Question(ConfigSection, frozen=True):
    """A goal question asked at the end (``[[questions]]``): answered by an agent
    when ``answer`` is in one of the top ``k`` results (case-insensitive) of a ranked
    ``search`` of its memory for ``question``, or of ``retrieve(question)``."""

    question: str
    answer: str
    ask: Literal["all"] | tuple[str, ...] = "all"
    k: int = DEFAULT_QUESTION_K

    def __post_init__(self) -> None:
        _not_empty(self, "question", "answer", "ask")
        self._at_least(1, "k")


class Scenario(ConfigSection, frozen=True):
    """A scenario file (see the module docstring)."""

    description: str = ""
    people: tuple[Person, ...] = ()
    population: Population | None = None
    relations: Relations = msgspec.field(default_factory=Relations)
    facts: Facts = msgspec.field(default_factory=Facts)
    talk: Talk = msgspec.field(default_factory=Talk)
    questions: tuple[Question, ...] = ()

    def __post_init__(self) -> None:
        if not self.people and self.population is None:
            raise ValueError("a scenario needs [[people]] or a [population] rule")
        names = [p.name for p in self.people]
        if len(set(names)) != len(names):
            raise ValueError("people's names must be distinct")


def town_scenario() -> Scenario:
    """The built-in town: the scenario a run plays when none is set."""
    return Scenario(
        description="The town: everyone talks to everyone and shares their planted facts.",
        population=Population(names=town.NAMES, personas=town.JOBS),
        facts=Facts(generate=FactTemplate(things=town.THINGS)),
    )


def load_scenario(path: str | Path) -> Scenario:
    """Load a scenario file.

    Raises:
        ConfigError: the file is missing or unreadable, not valid TOML, or has an
            unknown key or a bad value (naming the file and the key).
    """
    return load_toml(path, Scenario, what="scenario file")


def scenario_of(config: AppConfig) -> tuple[Scenario, str]:
    """The scenario ``config`` names (the built-in town when none), and its source
    (the file, or ``"town"``) for errors and the report.

    Raises:
        ConfigError: see :func:`load_scenario`.
    """
    path = config.simulation.scenario
    if not path:
        return town_scenario(), "town"
    return load_scenario(path), path


@dataclass(frozen=True, slots=True)
class Cast:
    """A scenario played out for one run: its agents and what happens to them.

    Attributes:
        names: the agents, in the run's order.
        personas: each agent's persona, by name.
        relations: each agent's relations, in the run's order, by name (absent:
            every other agent, the ``everyone`` rule).
        facts: each agent's planted facts, by name.
        questions: the goal questions, with the agents each is asked of.
        talk: what the scripted brain talks about.
        name: the scenario's name (its file's stem, or ``town``).
    """

    names: list[str]
    personas: dict[str, str]
    relations: dict[str, tuple[str, ...]]
    facts: dict[str, list[PlantedFact]]
    questions: list[tuple[Question, list[str]]]
    talk: Talk
    name: str

    def told_at(self, agent: str, step: int, fact_steps: int) -> list[PlantedFact]:
        """What the narrator tells ``agent`` at ``step``: its listed facts of that
        step, and one made from the template a step within the first ``fact_steps``
        (the same one again when there are fewer than ``fact_steps``)."""
        facts = self.facts[agent]
        made = [f for f in facts if f.step is None]
        told = [f for f in facts if f.step == step]
        if step < fact_steps and made:
            told = made[step * len(made) // fact_steps :][:1] + told
        return told

    def system(self, agent: str) -> str:
        """``agent``'s system message."""
        return self.talk.system.format(name=agent, persona=self.personas[agent])


def check_scenario(config: AppConfig) -> Cast:
    """Load the scenario ``config`` names and play it out for the run: a bad one is
    refused before anything runs.

    Raises:
        ConfigError: naming the file and the key.
    """
    scenario, source = scenario_of(config)
    return cast_scenario(scenario, config.simulation, source)


def cast_scenario(scenario: Scenario, sim: SimulationConfig, source: str = "scenario") -> Cast:
    """Play ``scenario`` out for a run of ``sim``: name its agents, link them, plant
    their facts and address the questions.

    Raises:
        ConfigError: the scenario does not fit the run (more or fewer people than
            ``sim.agents`` and no population to fill up with, a name made twice, a
            fact, edge or question naming an unknown agent, a fact's step past the
            run's steps, a ring too large for the agents), naming ``source`` and
            the key.
    """

    def refuse(key: str, reason: str) -> ConfigError:
        return ConfigError(f"{source}: key {key!r}: {reason}")

    people = list(scenario.people)
    if len(people) > sim.agents or (scenario.population is None and len(people) < sim.agents):
        raise refuse(
            "people",
            f"{len(people)} people listed but simulation.agents is {sim.agents}"
            + ("" if scenario.population else " (add a [population] rule to make the rest)"),
        )
    names = [p.name for p in people]
    personas = {p.name: p.persona for p in people}
    if scenario.population is not None:
        pop = scenario.population
        made = agent_names(sim.agents - len(people), pop.names)
        for i, name in enumerate(made):
            if name in personas:
                raise refuse("population.names", f"makes {name!r}, a name [[people]] has")
            personas[name] = pop.personas[i % len(pop.personas)]
        names += made
    known = set(names)

    def check_agent(key: str, name: str) -> None:
        if name not in known:
            shown = ", ".join(names[:10]) + (", ..." if len(names) > 10 else "")
            raise refuse(key, f"no agent named {name!r} (the agents: {shown})")

    relations = _relations(scenario.relations, names, sim.seed, refuse, check_agent)
    facts: dict[str, list[PlantedFact]] = {n: [] for n in names}
    template = scenario.facts.generate
    if template is not None:
        made_facts = plant_facts(
            names,
            sim.facts_per_agent,
            sim.seed,
            things=template.things,
            places=template.places or scenario.talk.places,
            statement=template.statement,
            query=template.query,
        )
        for fact in made_facts:
            facts[fact.agent].append(fact)
    for i, f in enumerate(scenario.facts.planted):
        key = f"facts.planted[{i}]"
        check_agent(f"{key}.agent", f.agent)
        if f.step >= sim.steps:
            raise refuse(
                f"{key}.step",
                f"step {f.step} is out of range: the run has {sim.steps} steps "
                f"(run at least {f.step + 1}: --steps {f.step + 1})",
            )
        facts[f.agent].append(
            PlantedFact(f.agent, f.statement, f.query, f.answer, topic=f.topic, step=f.step)
        )
    questions = []
    for i, q in enumerate(scenario.questions):
        if q.ask == "all":
            asked = names
        else:
            for name in q.ask:
                check_agent(f"questions[{i}].ask", name)
            asked = list(dict.fromkeys(q.ask))
        questions.append((q, asked))
    return Cast(
        names=names,
        personas=personas,
        relations=relations,
        facts=facts,
        questions=questions,
        talk=scenario.talk,
        name=Path(source).stem,
    )


def _relations(
    rel: Relations,
    names: list[str],
    seed: int,
    refuse: Callable[[str, str], ConfigError],
    check_agent: Callable[[str, str], None],
) -> dict[str, tuple[str, ...]]:
    """Each agent's relations in the run's order (none for ``everyone``: all)."""
    n = len(names)
    links: list[set[int]] = [set() for _ in names]
    if rel.rule in ("ring", "small-world"):
        if rel.k >= n:
            raise refuse("relations.k", f"a ring of {rel.k} neighbours needs more than {n} agents")
        _ring(links, rel.k, rel.rewire if rel.rule == "small-world" else 0.0, seed)
    index = {name: i for i, name in enumerate(names)}
    for j, (a, b) in enumerate(rel.edges):
        check_agent(f"relations.edges[{j}]", a)
        check_agent(f"relations.edges[{j}]", b)
        if a != b:
            links[index[a]].add(index[b])
            links[index[b]].add(index[a])
    if rel.rule == "everyone":
        return {}
    return {name: tuple(names[j] for j in sorted(links[i])) for i, name in enumerate(names)}


def _ring(links: list[set[int]], k: int, rewire: float, seed: int) -> None:
    """Link each agent to its ``k`` nearest in order, then rewire each such edge
    with chance ``rewire`` to a random agent it is not linked to (Watts-Strogatz)."""
    n = len(links)
    for i in range(n):
        for d in range(1, k // 2 + 1):
            links[i].add((i + d) % n)
            links[(i + d) % n].add(i)
    if not rewire:
        return
    rng = random.Random(f"relations-{seed}")
    for d in range(1, k // 2 + 1):
        for i in range(n):
            j = (i + d) % n
            if j not in links[i] or rng.random() >= rewire:
                continue
            picks = (rng.randrange(n) for _ in range(_REWIRE_TRIES))
            new = next((m for m in picks if m != i and m not in links[i]), None)
            if new is None:  # linked to nearly everyone already: keep the edge
                continue
            links[i].discard(j)
            links[j].discard(i)
            links[i].add(new)
            links[new].add(i)
