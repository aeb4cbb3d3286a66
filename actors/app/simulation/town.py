"""The town the built-in simulation tells a story in: its people, places and planted facts.

Each agent gets a readable name and a job; early on a narrator tells each agent a
few *planted facts* (unique codes of things at places), and at the end the
report says how many of them each agent can still find. This is the scenario a run
plays when ``[simulation] scenario`` is unset (``configs/scenarios/town.toml`` holds
the same town as a scenario file; see :mod:`actormem.actors.app.simulation.scenario`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Final

import msgspec

__all__ = (
    "FACT_QUERY",
    "FACT_STATEMENT",
    "JOBS",
    "NAMES",
    "PLACES",
    "THINGS",
    "TOOLS",
    "TOPICS",
    "PlantedFact",
    "agent_names",
    "plant_facts",
)

NAMES: Final = (
    "Ada", "Bram", "Cleo", "Dario", "Edda", "Finn", "Greta", "Hugo", "Ines", "Jonas",
    "Kira", "Lars", "Mira", "Nils", "Olga", "Pavel", "Quinn", "Rosa", "Sven", "Tove",
    "Ulla", "Viktor", "Wanda", "Xaver", "Yara", "Zeno",
)  # fmt: skip
JOBS: Final = (
    "baker", "blacksmith", "librarian", "fisher", "healer", "carpenter", "merchant",
    "teacher", "guard", "gardener", "brewer", "weaver",
)  # fmt: skip
PLACES: Final = (
    "mill", "harbour", "chapel", "market", "forge", "library", "orchard", "bridge",
    "tavern", "granary", "watchtower", "bathhouse", "quarry", "stables", "pier",
)  # fmt: skip
THINGS: Final = (
    "lock code", "hidden key", "spare lantern", "old map", "ledger", "signal flag",
    "bell rope", "seed vault", "tide chart", "cellar door", "weather vane", "strongbox",
)  # fmt: skip
TOPICS: Final = (
    "the harvest", "the storm last week", "the festival", "a missing goat", "the new well",
    "prices at the market", "the ferry schedule", "the mayor's speech", "a strange light",
)  # fmt: skip
#: The tools the scripted brain pretends to call.
TOOLS: Final = ("check_weather", "look_up_ledger", "count_inventory", "read_notice_board")
#: A planted fact's statement and the query that finds it (``{thing}``, ``{place}``,
#: ``{answer}`` filled in).
FACT_STATEMENT: Final = "Remember this: the {thing} of the {place} is {answer}."
FACT_QUERY: Final = "{thing} of the {place} is"


class PlantedFact(msgspec.Struct, frozen=True):
    """A fact told to one agent: found when a search for ``query`` returns ``answer``.

    ``step`` is the step the narrator tells it at; None: the facts made by
    :func:`plant_facts`, told one a step within the run's first ``fact_steps``.
    """

    agent: str
    statement: str
    query: str
    answer: str
    topic: str = "town"
    step: int | None = None


def agent_names(n: int, pool: Sequence[str] = NAMES) -> list[str]:
    """Return ``n`` readable agent names from ``pool``, in order, numbered from its
    second round on (``Ada``, ..., ``Ada2``); distinct when ``pool``'s names are."""
    names = []
    for i in range(n):
        base = pool[i % len(pool)]
        names.append(base if i < len(pool) else f"{base}{i // len(pool) + 1}")
    return names


def plant_facts(
    names: list[str],
    per_agent: int,
    seed: int,
    *,
    things: Sequence[str] = THINGS,
    places: Sequence[str] = PLACES,
    statement: str = FACT_STATEMENT,
    query: str = FACT_QUERY,
) -> list[PlantedFact]:
    """Make ``per_agent`` unique facts for each agent (the same for the same seed):
    a code for each pair of a thing and a place, the places numbered once the pairs
    run out; ``statement`` and ``query`` are filled in with ``{thing}``, ``{place}``
    and ``{answer}``, and each fact's topic is its place."""
    rng = random.Random(f"facts-{seed}")
    pairs = [(t, p) for t in things for p in places]
    rng.shuffle(pairs)
    facts = []
    k = 0
    for name in names:
        for _ in range(per_agent):
            thing, place = pairs[k % len(pairs)]
            round_ = k // len(pairs)
            where = place if round_ == 0 else f"{place} no. {round_ + 1}"
            answer = f"{rng.randrange(1000, 9999)}-{rng.choice('ABCDEFGHJKLMNPQRSTUVWXYZ')}"
            facts.append(
                PlantedFact(
                    agent=name,
                    statement=statement.format(thing=thing, place=where, answer=answer),
                    query=query.format(thing=thing, place=where, answer=answer),
                    answer=answer,
                    topic=place,
                )
            )
            k += 1
    return facts
