"""Backpressure between actors: a handler never waits for room, its sender is muted."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest

from actormem.runtime import Actor, Runtime, RuntimeConfig
from tests.support.streams import eventually

pytestmark = pytest.mark.anyio


class Hub(Actor):
    """Answers what leaves forward to it, and tells the leaf a note back (waiting for
    room, as an actor's ``ctx.tell`` does): the pool and the memories, in small."""

    gate: anyio.Event | None = None
    entered = 0
    handled = 0

    async def receive(self, message: Any) -> Any:
        Hub.entered += 1
        if Hub.gate is not None:
            await Hub.gate.wait()
        Hub.handled += 1
        kind, leaf = message
        if kind == "ask":
            await self.ctx.tell(f"leaf/{leaf}", ("note", leaf))
        return f"hub saw {leaf}"


class Leaf(Actor):
    """Forwards an ask to the hub; tells it ``n`` notes for ``("spray", n)``."""

    sent = 0

    async def receive(self, message: Any) -> Any:
        match message:
            case ("ask", key):
                return self.ctx.forward("hub/main", ("ask", key))
            case ("spray", n):
                for _ in range(n):
                    await self.ctx.tell("hub/main", ("note", self.ctx.key))
                    Leaf.sent += 1
                return None
            case _:
                return None


async def _until(check: Callable[[], bool]) -> None:
    async def holds() -> bool:
        return check()

    await eventually(holds, "the condition", limit=10.0)


def _runtime(mailbox_size: int, dispatchers: int) -> Runtime:
    rt = Runtime(RuntimeConfig(mailbox_size=mailbox_size, dispatchers=dispatchers))
    rt.register("hub", Hub)
    rt.register("leaf", Leaf)
    return rt


@pytest.fixture(autouse=True)
def _reset() -> None:
    Hub.gate = None
    Hub.entered = 0
    Hub.handled = 0
    Leaf.sent = 0


async def test_a_cycle_of_full_mailboxes_does_not_stall() -> None:
    # Every leaf forwards to one hub whose mailbox holds 2, and the hub tells each leaf
    # back. When a dispatcher waited for room, the forwards held every dispatcher while
    # the hub needed one: each ask timed out.
    leaves = 200
    answers: list[str] = []
    async with _runtime(mailbox_size=2, dispatchers=2) as rt:

        async def ask(i: int) -> None:
            answers.append(await rt.ask(f"leaf/{i}", ("ask", i), timeout=10.0))

        async with anyio.create_task_group() as tg:
            for i in range(leaves):
                tg.start_soon(ask, i)
    assert sorted(answers) == sorted(f"hub saw {i}" for i in range(leaves))


async def test_a_sender_to_a_full_mailbox_is_held_back_until_it_has_room() -> None:
    Hub.gate = anyio.Event()
    async with _runtime(mailbox_size=4, dispatchers=2) as rt:
        # The hub takes a first note and blocks on it; four more fill its mailbox.
        await rt.tell("leaf/a", ("spray", 1))
        await _until(lambda: Hub.entered >= 1)
        await rt.tell("leaf/a", ("spray", 4))
        await _until(lambda: Leaf.sent >= 5)
        # The next note goes past the bound, and the leaf is muted: its later sprays
        # wait in its own mailbox, not in the hub's.
        for _ in range(5):
            await rt.tell("leaf/a", ("spray", 1))
        await _until(lambda: Leaf.sent >= 6)
        for _ in range(20):  # the other dispatcher has every chance to run the leaf
            await anyio.sleep(0.001)
        assert Leaf.sent == 6
        assert rt.stats().max_mailbox_depth == 5  # the hub's bound, and one past it
        Hub.gate.set()
        await _until(lambda: Hub.handled >= 10)
    assert Leaf.sent == 10
