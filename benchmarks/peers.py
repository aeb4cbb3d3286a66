"""The same workloads on actormem, Pykka and autogen-core, in one run (the bench-peers extra).

Ask round trips next to Pykka's ThreadingActor and autogen-core's
SingleThreadedAgentRuntime, and adds to many agents next to autogen-core's
publish (install the ``bench-peers`` extra).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from actormem.benchmarks._common import (
    Row,
    at_least,
    compared,
    message_texts,
    plan,
    recorded_rows,
    step,
)
from actormem.benchmarks.throughput import actormem_add
from actormem.runtime import Actor, Runtime

__all__ = (
    "NAME",
    "NEEDS",
    "add_arguments",
    "run",
)

NAME = "peers"


#: What it imports beyond actormem's own dependencies (the ``bench-peers`` extra).
NEEDS = ("pykka", "autogen_core")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--messages", type=at_least(1), default=20_000, help="messages per workload"
    )
    parser.add_argument("--agents", type=at_least(1), default=100, help="agents published to")


class _Echo(Actor):
    inline_asks = True

    async def receive(self, message: Any) -> Any:
        return message


class _MailboxEcho(_Echo):
    inline_asks = False


async def _actormem_asks(n: int) -> tuple[float, float]:
    rt = Runtime()
    rt.register("echo", _Echo)
    rt.register("mailbox", _MailboxEcho)
    async with rt:
        rates = []
        for address in ("echo/a", "mailbox/a"):
            await rt.ask(address, 0)
            started = time.perf_counter()
            for i in range(n):
                await rt.ask(address, i)
            rates.append(n / (time.perf_counter() - started))
    return rates[0], rates[1]


def _pykka_ask(n: int) -> float:
    import pykka

    class Echo(pykka.ThreadingActor):  # type: ignore[misc]
        def on_receive(self, message: Any) -> Any:
            return message

    ref = Echo.start()
    try:
        ref.ask(0)
        started = time.perf_counter()
        for i in range(n):
            ref.ask(i)
        return n / (time.perf_counter() - started)
    finally:
        ref.stop()


async def _autogen(texts: list[str], agents: int) -> tuple[float, float]:
    from actormem.benchmarks._autogen_peer import publish_and_send

    return await publish_and_send(texts, agents)


async def run(args: argparse.Namespace) -> list[Row]:
    texts = message_texts(args.messages)
    rows = recorded_rows()
    plan(4)
    step("Pykka ask round trips")
    pykka_ask = _pykka_ask(args.messages)
    rows.append(Row(name="Pykka ask round trip (ThreadingActor)", value=pykka_ask, unit="ask/s"))
    step("actormem ask round trips")
    inline, mailbox = await _actormem_asks(args.messages)
    rows += [
        compared(
            "actormem ask round trip, inline path",
            inline,
            "ask/s",
            "Pykka ask",
            pykka_ask,
            target=">= 2x Pykka",
        ),
        compared("actormem ask round trip, mailbox path", mailbox, "ask/s", "Pykka ask", pykka_ask),
    ]
    step(f"autogen-core publish to {args.agents} agents, send_message round trips")
    publish, send = await _autogen(texts, args.agents)
    rows += [
        Row(name=f"autogen-core publish to {args.agents} agents", value=publish, unit="msg/s"),
        Row(name="autogen-core send_message round trip", value=send, unit="ask/s"),
        compared(
            "actormem ask round trip (inline) vs autogen send_message",
            inline,
            "ask/s",
            "autogen send_message",
            send,
        ),
    ]
    step(f"actormem add to {args.agents} agents")
    adds = (await actormem_add(texts, args.agents)).wall
    rows.append(
        compared(
            f"actormem add (tell) to {args.agents} agents, token counting included",
            adds,
            "msg/s",
            "autogen publish",
            publish,
            target=">= 5x autogen publish",
        )
    )
    return rows
