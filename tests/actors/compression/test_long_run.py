"""A memory that compresses again and again, as the memory actor does, keeps its facts."""

from __future__ import annotations

import random

import pytest

from actormem.actors.compression import CompressionConfig, OfflineSummarizer, compress
from actormem.actors.messages import Message
from actormem.runtime.tokens import get_counter
from tests.actors.compression._build import (
    assert_valid,
    assistant,
    chatter,
    counted,
    reachable_text,
    system,
    tokens,
    tool_unit,
    user,
)

pytestmark = pytest.mark.anyio

NAMES = ["Mara", "Olav", "Ines", "Tomas", "Yuki", "Priya", "Kwame", "Lena", "Arjun", "Sofia"]


def facts() -> list[tuple[str, str]]:
    """(needle, sentence) pairs: codes, birthdays, decisions, amounts."""
    out = []
    for i, name in enumerate(NAMES):
        out.append((f"{4000 + 37 * i}", f"The locker code of {name} is {4000 + 37 * i}."))
        out.append(
            (f"19{70 + i}-0{1 + i % 9}-1{i}", f"{name} was born on 19{70 + i}-0{1 + i % 9}-1{i}.")
        )
    return out


def stream(seed: int) -> list[Message]:
    rng = random.Random(seed)
    planted = facts()
    rng.shuffle(planted)
    out: list[Message] = []
    for r in range(120):
        out.append(user(f"{rng.choice(NAMES)} asks: " + chatter(rng.randint(1, 6), "the harvest")))
        if planted and r % 6 == 2:
            out.append(user(planted.pop()[1]))
        for _ in range(rng.randint(0, 4)):
            payload = "no news " + chatter(rng.randint(1, 8), "the fields")
            if rng.random() < 0.1:
                payload += " data" * 1500  # a large payload now and then
            out += tool_unit("search", {"q": f"harvest {r}"}, payload)
        out.append(assistant("Understood. " + chatter(rng.randint(1, 4), "the harvest")))
    return out


@pytest.mark.parametrize("seed", [1, 2])
async def test_repeated_compression_stays_in_budget_and_keeps_every_fact(seed: int) -> None:
    config = CompressionConfig(msg_threshold=40, max_tokens=4000, last_keep=10)
    counter = get_counter()
    summarizer = OfflineSummarizer(counter)
    working: list[Message] = counted([system("You are the harvest clerk.")])
    store: dict[str, list[Message]] = {}
    compressions = saved = 0
    for message in counted(stream(seed)):
        working.append(message)
        if config.over_budget(len(working), tokens(working)):
            out = await compress(working, config=config, counter=counter, summarizer=summarizer)
            assert out.under_budget, out.note
            assert_valid(out.messages, before=working)
            working = out.messages
            store.update(out.offloaded)
            compressions += 1
            saved += out.tokens_saved
    assert compressions > 5 and saved > 0
    in_context = "\n".join(m.text() for m in working)
    reachable = reachable_text(working, store)
    needles = [needle for needle, _ in facts()]
    assert all(needle in reachable for needle in needles)
    # Most facts are still in plain sight after dozens of compressions.
    assert sum(needle in in_context for needle in needles) >= len(needles) * 0.5
