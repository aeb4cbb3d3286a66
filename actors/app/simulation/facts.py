"""What an agent knows: the planted facts whose answers a text holds.

An answer is looked up by its longest word, as a whole word of the text, then
checked as a substring: the cost goes with the text's length, not with the number
of facts (a town of 10,000 agents plants 30,000).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

from actormem.actors.app.simulation.town import PlantedFact

__all__ = ("FactIndex",)

_WORD: Final = re.compile(r"\w+")


class FactIndex:
    """Planted facts, looked up in a text by their answers (see the module docstring).

    Args:
        facts: the facts to start with (more with :meth:`add`).

    Attributes:
        ids: each fact's id, in the order added.
    """

    __slots__ = ("_answers", "_by_word", "_loose", "ids")

    def __init__(self, facts: Iterable[PlantedFact] = ()) -> None:
        self.ids: dict[PlantedFact, int] = {}
        self._answers: list[str] = []
        self._by_word: dict[str, list[int]] = {}
        self._loose: list[int] = []
        for fact in facts:
            self.add(fact)

    def __len__(self) -> int:
        return len(self._answers)

    def add(self, fact: PlantedFact) -> None:
        """Index ``fact`` (again: no change)."""
        if fact in self.ids:
            return
        i = self.ids[fact] = len(self._answers)
        self._answers.append(fact.answer)
        words = _WORD.findall(fact.answer)
        if words:
            self._by_word.setdefault(max(words, key=len), []).append(i)
        else:
            self._loose.append(i)

    def found(self, text: str) -> set[int]:
        """The ids of the facts whose answer is in ``text``."""
        answers = self._answers
        hits = {i for i in self._loose if answers[i] in text}
        by_word = self._by_word
        for word in set(_WORD.findall(text)):
            for i in by_word.get(word, ()):
                if answers[i] in text:
                    hits.add(i)
        return hits
