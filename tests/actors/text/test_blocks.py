"""Context blocks: a block's token count is the sum of its pieces' counts."""

from __future__ import annotations

import random

import pytest

from actormem.actors.text.blocks import quote, render_block
from actormem.runtime.tokens import ENCODINGS, get_counter

_ALPHABET = "abc XYZ 019 .,;:!?'\"-_/\\<>()[]{}|@#$%^&*+=~`\t\n é東京🙂\u200b"


def _text(rng: random.Random) -> str:
    return "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(0, 40)))


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_block_of_lines_costs_no_more_than_its_budget(encoding: str) -> None:
    counter = get_counter(encoding)
    rng = random.Random(encoding)
    for _ in range(400):
        # The renderers' shape ("- " and quoted data), and lines of any other shape.
        if rng.random() < 0.7:
            lines = [f"- {quote(_text(rng))} at 12:00: {quote(_text(rng))}" for _ in range(5)]
        else:
            lines = [_text(rng) for _ in range(5)]
        budget = rng.randint(1, 120)
        block = render_block(
            "data", _text(rng).replace("\n", " ").strip() or "Quoted.", lines, budget, counter
        )
        if block is not None:
            assert counter.count_text(block) <= budget
            assert counter.count_text(block) == len(counter.encode(block))
            if all(line.startswith("- ") for line in lines):
                pieces = block.split("\n")
                head = "\n".join(pieces[:2]) + "\n"
                assert counter.count_text(block) == counter.count_text(head) + sum(
                    counter.count_text(p + "\n") for p in pieces[2:-1]
                ) + counter.count_text(pieces[-1])
