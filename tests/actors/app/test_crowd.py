"""The run's agents as a turn sees them: the other agents' names, a view of the run's list."""

from __future__ import annotations

import random

import pytest

from actormem.actors.app.simulation.brains import Others


def test_others_are_every_name_but_one_in_order() -> None:
    names = ["Ada", "Bram", "Cleo", "Dario"]
    positions = {n: i for i, n in enumerate(names)}
    others = Others(names, 1, positions)
    assert list(others) == ["Ada", "Cleo", "Dario"] and len(others) == 3
    assert (others[0], others[1], others[-1]) == ("Ada", "Cleo", "Dario")
    assert others[:2] == ("Ada", "Cleo") and others[::-1] == ("Dario", "Cleo", "Ada")
    assert "Cleo" in others and "Bram" not in others and "Zeno" not in others and 3 not in others
    assert others == ("Ada", "Cleo", "Dario") and others != ("Ada", "Bram", "Cleo")
    assert hash(others) == hash(("Ada", "Cleo", "Dario"))
    assert random.Random(1).choice(others) in {"Ada", "Cleo", "Dario"}
    with pytest.raises(IndexError):
        others[3]
    with pytest.raises(IndexError):
        others[-4]
