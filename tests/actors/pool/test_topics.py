"""The pool's topics: which insight a full topic evicts."""

from __future__ import annotations

import random

from actormem.actors.pool.config import PoolConfig
from actormem.actors.pool.topics import Topics


def test_a_full_topic_evicts_the_least_important_then_oldest_then_first_held() -> None:
    rng = random.Random(5)
    topics = Topics(PoolConfig(per_topic_limit=20), None)
    held: dict[str, tuple[float, float, int]] = {}
    for n in range(400):
        importance = rng.choice([0.1, 0.5, 0.9])
        status, insight, _, evicted = topics.put(
            f"note {n} about item {rng.randint(0, 10**9)}", "town", "ada", importance, ()
        )
        assert status == "new"
        held[insight.id] = (insight.importance, insight.created, n)
        for key in evicted:
            weakest = min(held, key=held.__getitem__)
            assert key == weakest
            del held[key]
        if n % 50 == 0:  # an erased insight keeps its place in the order
            topics.erase_source("ada")
    assert {i.id for i in topics.insights()} == set(held)
