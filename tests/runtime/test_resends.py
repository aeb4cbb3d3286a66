"""An ask whose reply does not come is sent again, from whatever task asked it."""

from __future__ import annotations

import asyncio
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
