"""The run's agents as a turn sees them: the other agents' names, a view of the run's list;
what a turn that speaks stores, and in which order."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from actormem.actors import AppConfig, MemoryRuntime
from actormem.actors.app.simulation.brains import Crowd, Others, Turn
from actormem.actors.messages import Message
from actormem.runtime import Transport


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


class _Talker:
    """A brain that answers every call; Bram's, answering Ada, has Cleo speak to her first."""

    def __init__(self) -> None:
        self.crowd: Crowd | None = None

    async def step(self, turn: Turn) -> None:
        """Takes no step of its own here."""

    async def respond(self, turn: Turn, caller: str, said: str) -> str:
        if (turn.agent, caller) == ("Bram", "Ada") and self.crowd is not None:
            await self.crowd.turn("Cleo", turn.step).speak("Ada", "Cleo cuts in")
        return f"{turn.agent} heard {caller}"


@pytest.mark.anyio
async def test_a_call_to_a_speaking_agent_lands_outside_its_exchange(
    make_transport: Callable[[], Transport],
) -> None:
    brain = _Talker()
    names = ("Ada", "Bram", "Cleo")
    async with MemoryRuntime(AppConfig(), transport=make_transport()) as rt:
        crowd = Crowd(
            {n: rt.memory(n) for n in names},
            dict.fromkeys(names, brain),
            seed=1,
            context_tokens=4096,
        )
        brain.crowd = crowd
        turn = crowd.turn("Ada", 0)
        turn.remember(Message(role="user", name="narrator", content="The mill opens at 7."))
        assert await turn.speak("Bram", "Hello Bram") == "Bram heard Ada"
        await turn.flush()
        ada = await rt.memory("Ada").get(scope="history")
    # Ada's turn (what the narrator told her, her line and Bram's answer) is one unit:
    # Cleo's call, made while Bram answered, is stored before it, not inside it.
    assert [(m.role, m.name) for m in ada] == [
        ("agent_call", "Cleo"),
        ("agent_response", "Ada"),
        ("user", "narrator"),
        ("assistant", "Ada"),
        ("user", "Bram"),
    ]
