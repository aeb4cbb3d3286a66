"""The town the built-in simulation tells a story in: its people, places and planted facts.

Each agent gets a readable name and a job; early on a narrator tells each agent a
few *planted facts* (unique codes of things at places), and at the end the
report says how many of them each agent can still find.
"""

from __future__ import annotations

import random
from typing import Final

import msgspec

__all__ = (
    "JOBS",
    "PLACES",
    "THINGS",
    "TOOLS",
    "TOPICS",
    "PlantedFact",
    "agent_names",
    "plant_facts",
)

_FIRST: Final = (
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


class PlantedFact(msgspec.Struct, frozen=True):
    """A fact told to one agent: found when a search for ``query`` returns ``answer``."""

    agent: str
    statement: str
    query: str
    answer: str
    topic: str = "town"


def agent_names(n: int) -> list[str]:
    """Return ``n`` distinct, readable agent names."""
    names = []
    for i in range(n):
        base = _FIRST[i % len(_FIRST)]
        names.append(base if i < len(_FIRST) else f"{base}{i // len(_FIRST) + 1}")
    return names


def plant_facts(names: list[str], per_agent: int, seed: int) -> list[PlantedFact]:
    """Make ``per_agent`` unique facts for each agent (the same for the same seed)."""
    rng = random.Random(f"facts-{seed}")
    pairs = [(t, p) for t in THINGS for p in PLACES]
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
                    statement=f"Remember this: the {thing} of the {where} is {answer}.",
                    query=f"{thing} of the {where} is",
                    answer=answer,
                    topic=place,
                )
            )
            k += 1
    return facts
