"""The goal questions a scenario asks its agents at the end of a run, scored.

An agent answers a question *by search* when the expected answer is in one of the
top ``k`` messages a ranked (BM25) ``search`` of its working memory returns for
the question, and *by retrieve* when it is in one of the top ``k`` long-term
memories ``retrieve(question, k)`` returns; both compare case-insensitively.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import msgspec

from actormem.actors.app.simulation.scenario import Question
from actormem.actors.app.wiring import MemoryRuntime

__all__ = ("GoalScore", "score_questions")


class GoalScore(msgspec.Struct, frozen=True, kw_only=True):
    """How many of the agents asked one goal question answered it.

    Attributes:
        question: the question, as the scenario asks it.
        answer: the answer expected.
        k: how many results of each ``search`` and ``retrieve`` were looked in.
        asked: the agents asked.
        by_search: those whose ``search`` found the answer.
        by_retrieve: those whose ``retrieve`` found it.
        answered: those who found it either way.
    """

    question: str
    answer: str
    k: int
    asked: int
    by_search: int
    by_retrieve: int
    answered: int


async def score_questions(
    rt: MemoryRuntime,
    questions: Sequence[tuple[Question, Sequence[str]]],
    scores: list[GoalScore],
    *,
    concurrency: int = 50,
) -> None:
    """Ask each question of its agents (up to ``concurrency`` at once) and append its
    score to ``scores`` once all of them have answered."""
    limiter = anyio.CapacityLimiter(concurrency)
    for question, asked in questions:
        found: dict[str, tuple[bool, bool]] = {}
        async with anyio.create_task_group() as tg:
            for name in asked:
                tg.start_soon(_ask, rt, limiter, name, question, found)
        by_search = sum(s for s, _ in found.values())
        by_retrieve = sum(r for _, r in found.values())
        scores.append(
            GoalScore(
                question=question.question,
                answer=question.answer,
                k=question.k,
                asked=len(asked),
                by_search=by_search,
                by_retrieve=by_retrieve,
                answered=sum(s or r for s, r in found.values()),
            )
        )


async def _ask(
    rt: MemoryRuntime,
    limiter: anyio.CapacityLimiter,
    name: str,
    question: Question,
    found: dict[str, tuple[bool, bool]],
) -> None:
    """Note in ``found`` whether ``name``'s search, and its retrieve, find the answer."""
    async with limiter:
        memory = rt.memory(name)
        expected = question.answer.casefold()
        hits = await memory.search(question.question, mode="ranked", k=question.k)
        recalled = await memory.retrieve(question.question, k=question.k)
    found[name] = (
        any(expected in m.text().casefold() for m in hits),
        any(expected in r.entry.text.casefold() for r in recalled),
    )
