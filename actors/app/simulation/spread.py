"""How information spreads: for each planted fact, who knows it, how and when.

An agent learns a fact the first time one of these carries its answer (looked up
as :class:`~actormem.actors.app.simulation.facts.FactIndex` does):

- *by the narrator*: a ``user`` message named ``narrator`` in its history;
- *by an agent*: a message in its history from another agent of the run (an
  ``agent_call``, ``agent_response`` or ``user`` message named after it);
- *by feed*: an insight the pool delivered and the agent holds (its source the
  agent that shared it), when no such message came before.

The first of them wins, in history order, the history before the insights. An
agent that holds the answer some other way (in its own line, a tool result) knows
the fact, in no way of the three. Knowing is kept: an insight pushed out of the
inbox later still counts.

*Who heard from whom* makes a tree per fact, rooted at the agents the narrator
told: an agent's parent is the agent it heard the fact from. Its *depth* is the
longest chain (0: only the narrator's), its *breadth* the widest level (the roots
included).

The agents who *could* know a fact are those reachable from its origin (the agent
told it) through the scenario's relations; all agents when the relations are
``everyone`` or when agents share with the pool (every agent subscribes to every
topic): a scripted brain that shares facts or gossips, or any other brain
(:func:`reach`). A fact reaches half of them (or 90%) at the first step at which
at least that many of them know it.

The figures come from the agents the run's timeline measures
(:data:`~actormem.actors.app.simulation.timeline.FACTS_SAMPLE` at most): all of
them in a smaller run, else a sample. In a sampled run the counts are the
sample's, ``could`` counts the sampled agents who could, and depth and breadth
are left out (a chain passes through agents outside the sample).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Final, Literal

import msgspec

from actormem.actors.app.simulation.facts import FactIndex
from actormem.actors.app.simulation.scenario import Cast
from actormem.actors.app.simulation.town import PlantedFact
from actormem.actors.config import SimulationConfig
from actormem.actors.messages import Message
from actormem.actors.pool.insights import Insight

__all__ = (
    "NARRATOR",
    "SPREAD_LISTED",
    "FactReport",
    "FactSpread",
    "Spread",
    "SpreadReport",
    "reach",
)

#: The name the narrator's messages carry.
NARRATOR: Final = "narrator"
#: The most facts the report lists one by one (its medians cover them all).
SPREAD_LISTED: Final = 1_000
_FROM_AGENT: Final = frozenset({"agent_call", "agent_response", "user"})

Way = Literal["narrator", "agent", "feed", "other"]


class FactSpread(msgspec.Struct, frozen=True, array_like=True):
    """One fact in a step's row of ``timeseries.jsonl``: of the measured agents who
    ``could`` know it, how many ``known`` it by the end of the step, and how they
    learnt it (the rest, ``known`` less the three, some other way). Written as an
    array, ``[fact, could, known, by_narrator, by_agent, by_feed]``, so that a row
    of a run with thousands of facts stays small."""

    fact: int
    could: int
    known: int
    by_narrator: int
    by_agent: int
    by_feed: int


class FactReport(msgspec.Struct, frozen=True, kw_only=True):
    """One fact's spread at the end of the run.

    ``fact`` is its number in the time series, ``agent`` the one first told it,
    ``step`` when; ``could`` ... ``by_feed`` as in :class:`FactSpread`; ``depth``
    and ``breadth`` its who-heard-from-whom tree's (None in a sampled run);
    ``steps_to_half`` and ``steps_to_90`` the steps it took from being told to
    reach 50% and 90% of the agents who could know it (None: not reached).
    """

    fact: int
    agent: str
    answer: str
    step: int
    could: int
    known: int
    by_narrator: int
    by_agent: int
    by_feed: int
    depth: int | None
    breadth: int | None
    steps_to_half: int | None
    steps_to_90: int | None


class SpreadReport(msgspec.Struct, frozen=True, kw_only=True):
    """How the facts told spread (the report's ``spread``).

    ``agents_measured`` agents were measured (``sampled``: a sample of the run's);
    ``facts`` were told, of which ``facts_measured`` are known to a measured agent.
    ``reached_half`` and ``reached_90`` count the facts that reached 50% and 90% of
    the agents who could know them; the medians go over the measured facts
    (``steps_to_*`` over those that reached it; None when none). ``per_fact``
    lists the first :data:`SPREAD_LISTED` measured facts, in the order told.
    """

    agents_measured: int
    sampled: bool
    facts: int
    facts_measured: int
    reached_half: int
    reached_90: int
    known_share_median: float
    depth_median: float | None
    breadth_median: float | None
    steps_to_half_median: float | None
    steps_to_90_median: float | None
    per_fact: list[FactReport]


def reach(cast: Cast, sim: SimulationConfig) -> Callable[[PlantedFact], frozenset[str]]:
    """Who could know a fact of ``cast``'s run: see the module docstring."""
    everyone = frozenset(cast.names)
    brain = sim.brain.kind
    pooled = brain != "scripted" or sim.share_facts > 0 or sim.gossip_rate > 0
    if pooled or not cast.relations:
        return lambda fact: everyone
    reachable: dict[str, frozenset[str]] = {}

    def could(fact: PlantedFact) -> frozenset[str]:
        origin = fact.agent
        if origin not in reachable:
            seen, todo = {origin}, [origin]
            while todo:
                for other in cast.relations.get(todo.pop(), ()):
                    if other not in seen:
                        seen.add(other)
                        todo.append(other)
            reachable[origin] = frozenset(seen)
        return reachable[origin]

    return could


class _Fact:
    """What is known of one fact: who learnt it, when, how and from whom."""

    __slots__ = ("could", "counts", "fact", "half", "learnt", "ninety", "step")

    def __init__(self, fact: PlantedFact, step: int, could: int) -> None:
        self.fact, self.step, self.could = fact, step, could
        self.learnt: dict[str, tuple[int, Way, str | None]] = {}  # agent: step, way, source
        self.counts = {"narrator": 0, "agent": 0, "feed": 0, "other": 0}
        self.half: int | None = None
        self.ninety: int | None = None

    def learn(self, agent: str, step: int, way: Way, source: str | None) -> None:
        if agent not in self.learnt:
            self.learnt[agent] = (step, way, source)
            self.counts[way] += 1

    def row(self, number: int, step: int) -> FactSpread:
        known, could = len(self.learnt), self.could
        if self.half is None and could and 2 * known >= could:
            self.half = step - self.step
        if self.ninety is None and could and 10 * known >= 9 * could:
            self.ninety = step - self.step
        counts = self.counts
        return FactSpread(
            fact=number,
            could=could,
            known=known,
            by_narrator=counts["narrator"],
            by_agent=counts["agent"],
            by_feed=counts["feed"],
        )

    def tree(self) -> tuple[int, int]:
        """The depth and breadth of who heard from whom, from the narrator's roots."""
        children: dict[str, list[str]] = {}
        for agent, (_, way, source) in self.learnt.items():
            if way in ("agent", "feed") and source is not None:
                children.setdefault(source, []).append(agent)
        level = [a for a, (_, way, _) in self.learnt.items() if way == "narrator"]
        seen = set(level)
        depth, breadth = -1, 0
        while level:
            depth, breadth = depth + 1, max(breadth, len(level))
            below = [c for a in level for c in children.get(a, ()) if c not in seen]
            seen.update(below)
            level = below
        return max(depth, 0), breadth


class Spread:
    """Follows each fact told from agent to agent, step by step (see the module
    docstring). The timeline shows it what it reads of each measured agent:
    :meth:`heard` each history message, :meth:`fed` each held insight, in order,
    after :meth:`begin` and before :meth:`row`.

    Args:
        names: the run's agents.
        measured: the agents measured (all of ``names``, or a sample).
        could: who could know a fact (:func:`reach`; None: every agent).
    """

    def __init__(
        self,
        names: Collection[str],
        measured: Collection[str],
        could: Callable[[PlantedFact], Collection[str]] | None = None,
    ) -> None:
        self._names = frozenset(names)
        self._measured = frozenset(measured)
        self.sampled = len(self._measured) < len(self._names)
        self._could = could
        self._facts: list[_Fact] = []
        self._known: list[int] = []  # the facts a measured agent knows, in order told
        self._step = 0

    def begin(self, step: int, facts: FactIndex) -> None:
        """Start measuring ``step``: the facts of ``facts`` not seen yet were told in it."""
        self._step = step
        for fact in list(facts.ids)[len(self._facts) :]:
            could = self._could(fact) if self._could is not None else self._names
            self._facts.append(_Fact(fact, step, len(self._measured.intersection(could))))

    def heard(self, agent: str, message: Message, found: Iterable[int]) -> None:
        """``agent``'s history holds ``message``, carrying the answers of ``found``."""
        name = message.name
        if name == NARRATOR and message.role == "user":
            way: Way = "narrator"
        elif name and name != agent and name in self._names and message.role in _FROM_AGENT:
            way = "agent"
        else:
            way, name = "other", None
        for i in found:
            self._learn(i, agent, way, name)

    def fed(self, agent: str, insight: Insight, found: Iterable[int]) -> None:
        """``agent`` holds ``insight``, carrying the answers of ``found``."""
        for i in found:
            self._learn(i, agent, "feed", insight.source)

    def _learn(self, i: int, agent: str, way: Way, source: str | None) -> None:
        fact = self._facts[i]
        if not fact.learnt:
            self._known.append(i)
        fact.learn(agent, self._step, way, source)

    def row(self) -> list[FactSpread]:
        """The step's figures: one per fact a measured agent knows, in the order told."""
        self._known.sort()
        return [self._facts[i].row(i, self._step) for i in self._known]

    def report(self) -> SpreadReport:
        """The spread of the facts told so far (see :class:`SpreadReport`)."""
        per_fact = []
        for i in sorted(self._known):
            f = self._facts[i]
            depth, breadth = (None, None) if self.sampled else f.tree()
            per_fact.append(
                FactReport(
                    fact=i,
                    agent=f.fact.agent,
                    answer=f.fact.answer,
                    step=f.step,
                    could=f.could,
                    known=len(f.learnt),
                    by_narrator=f.counts["narrator"],
                    by_agent=f.counts["agent"],
                    by_feed=f.counts["feed"],
                    depth=depth,
                    breadth=breadth,
                    steps_to_half=f.half,
                    steps_to_90=f.ninety,
                )
            )
        halves = [f.steps_to_half for f in per_fact if f.steps_to_half is not None]
        nineties = [f.steps_to_90 for f in per_fact if f.steps_to_90 is not None]
        return SpreadReport(
            agents_measured=len(self._measured),
            sampled=self.sampled,
            facts=len(self._facts),
            facts_measured=len(per_fact),
            reached_half=len(halves),
            reached_90=len(nineties),
            known_share_median=_median([f.known / f.could for f in per_fact if f.could]) or 0.0,
            depth_median=_median([f.depth for f in per_fact if f.depth is not None]),
            breadth_median=_median([f.breadth for f in per_fact if f.breadth is not None]),
            steps_to_half_median=_median(halves),
            steps_to_90_median=_median(nineties),
            per_fact=per_fact[:SPREAD_LISTED],
        )


def _median(values: Sequence[float]) -> float | None:
    return round(statistics.median(values), 4) if values else None
