"""An ask whose reply does not come is sent again, from whatever task asked it."""

from __future__ import annotations

import asyncio
import gc
from collections import Counter
from typing import Any

import anyio
import anyio.to_thread
import pytest

from actormem.runtime import Actor, Envelope, Runtime, RuntimeConfig
from actormem.runtime.transports import LocalTransport


class Echo(Actor):
    async def receive(self, message: Any) -> Any:
        return message


class LosesFirstSends(LocalTransport):
    """Loses every ask's first send: only the copies sent again arrive."""

    def resend_after(self) -> float:
        return 0.01

    def send_nowait(self, envelope: Envelope) -> None:
        if envelope.correlation is None:
            super().send_nowait(envelope)


def runtime() -> Runtime:
    rt = Runtime(RuntimeConfig(ask_timeout=30.0), transport=LosesFirstSends())
    rt.register("echo", Echo)
    return rt


@pytest.mark.anyio
async def test_an_ask_from_a_coroutine_sent_from_another_thread_is_resent() -> None:
    # The coroutine runs in a task whose context says no async library runs (the
    # worker thread's): the resend must not depend on it.
    async with runtime() as rt:
        loop = asyncio.get_running_loop()

        def from_a_thread() -> Any:
            return asyncio.run_coroutine_threadsafe(rt.ref("echo/a").ask("hi"), loop).result()

        assert await anyio.to_thread.run_sync(from_a_thread) == "hi"


def test_an_ask_under_plain_asyncio_run_is_resent() -> None:
    async def main() -> Any:
        async with runtime() as rt:
            return await rt.ref("echo/a").ask("hi")

    assert asyncio.run(main()) == "hi"


@pytest.mark.anyio
async def test_every_ask_of_a_burst_is_resent_until_answered() -> None:
    answers: list[Any] = []
    async with runtime() as rt:

        async def one(i: int) -> None:
            answers.append(await rt.ref(f"echo/{i % 7}").ask(i))

        async with anyio.create_task_group() as tg:
            for i in range(50):
                tg.start_soon(one, i)
        assert sorted(answers) == list(range(50))
        assert rt._asks.resent >= 50


class ResendsLate(LocalTransport):
    """Delivers every ask; a copy would go a minute later."""

    def resend_after(self) -> float:
        return 60.0


class Waits(Actor):
    """Answers once its release is set."""

    release: anyio.Event

    async def receive(self, message: Any) -> Any:
        await Waits.release.wait()
        return message


@pytest.mark.anyio
async def test_answered_asks_leave_nothing_tracked_by_the_collector_while_an_older_one_waits() -> (
    None
):
    # The asks sent after one that waits are kept (when each is due to be sent again)
    # until the resender reaches them behind it, a minute here: as numbers, not as a
    # tracked object per ask that young collections would count and walk.
    Waits.release = anyio.Event()
    rt = Runtime(RuntimeConfig(ask_timeout=30.0), transport=ResendsLate())
    rt.register("echo", Echo)
    rt.register("waits", Waits)
    async with rt, anyio.create_task_group() as tg:
        tg.start_soon(rt.ref("waits/a").ask, "first")
        for i in range(20):  # the actors are up, the resender waits for the first ask
            await rt.ref("echo/a").ask(i)
        gc.collect()
        gc.disable()
        try:
            before = gc.get_objects()  # kept alive: no id of theirs is reused
            known = {id(o) for o in before}
            for i in range(500):
                assert await rt.ref("echo/a").ask(i) == i
            left = [o for o in gc.get_objects() if id(o) not in known]
        finally:
            gc.enable()
            Waits.release.set()
        # Less than one per ask (the cancelled timers the event loop has not dropped yet).
        assert len(left) < 250, Counter(type(o).__name__ for o in left).most_common(5)
