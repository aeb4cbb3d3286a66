"""The offline summarizer: tokens saved, planted facts kept, latency, and stalls it causes.

Tokens saved, planted-fact retention and latency of the offline summarizer on
simulation-style conversations, and the longest stall other tasks of the process
see while one long conversation is compressed.
"""

from __future__ import annotations

import argparse
import json
import random
import time

import anyio
import msgspec

from actormem.actors import CompressionConfig, MemoryRuntime, Message, ToolCall, compress
from actormem.actors.app.simulation import agent_names, plant_facts
from actormem.actors.compression import CompressRequest, OfflineSummarizer, compressor_address
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
    "TICK",
    "add_arguments",
    "conversation",
    "run",
    "stall_rows",
)

NAME = "compression"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--conversations", type=at_least(1), default=30, help="conversations compressed"
    )
    parser.add_argument(
        "--messages", type=at_least(1), default=300, help="messages per conversation"
    )
    parser.add_argument(
        "--max-tokens", type=at_least(1), default=4_000, help="compression max_tokens (tokens)"
    )
    parser.add_argument(
        "--stall-messages",
        type=at_least(10),
        default=3_000,
        help="messages of the conversation compressed while a ticker task measures stalls",
    )
    parser.add_argument(
        "--stall-runs", type=at_least(1), default=3, help="compressions the stall is measured over"
    )
    parser.add_argument(
        "--timeout",
        type=at_least(0.001, float),
        default=0.05,
        help="the compression timeout whose honouring is measured (seconds)",
    )


def conversation(seed: int, size: int, facts: list[str]) -> list[Message]:
    rng = random.Random(seed)
    texts = message_texts(size, chars=160, seed=seed + 1)
    counter = get_counter()
    out = [Message(role="system", content="You are a townsperson.")]
    spots = sorted(rng.sample(range(1, size - 5), len(facts)))
    for i in range(1, size):
        if spots and i == spots[0]:
            spots.pop(0)
            out.append(Message(role="user", name="narrator", content=facts.pop(0)))
        elif i % 7 == 0:
            call = ToolCall(f"c{i}", "look_up", json.dumps({"q": texts[i][:30]}))
            out.append(Message(role="assistant", tool_calls=(call,)))
            out.append(Message(role="tool", tool_call_id=call.id, content=texts[i] * 3))
        else:
            out.append(Message(role="user" if i % 2 else "assistant", content=texts[i]))
    return [m.with_tokens(counter.count_message(m.to_openai())) for m in out]


#: The ticker's period: it asks to wake every millisecond.
TICK = 0.001


async def _ticker(stop: anyio.Event, lateness: list[float]) -> None:
    """Another task of the process: how late does it wake, tick after tick?"""
    while not stop.is_set():
        start = time.perf_counter()
        await anyio.sleep(TICK)
        lateness.append(time.perf_counter() - start - TICK)


async def _stall(rt: MemoryRuntime, request: CompressRequest | None, idle: float) -> float:
    """The ticker's largest lateness (s) while the compressor actor answers ``request``,
    or, with no request, while the loop merely waits ``idle`` seconds (the baseline)."""
    lateness: list[float] = []
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_ticker, stop, lateness)
        await anyio.sleep(0.02)
        lateness.clear()
        if request is None:
            await anyio.sleep(idle)
        else:
            address = compressor_address(request.agent, rt.app_config.compression.concurrency)
            await rt.ask(address, request, timeout=600)
        stop.set()
    return max(lateness, default=0.0)


async def stall_rows(args: argparse.Namespace) -> list[Row]:
    """The longest stall of another task of the process while the compressor actor
    compresses one long conversation (inside an open runtime, so with its garbage
    collector settings), and how soon a compression's timeout ends it."""
    counter = get_counter()
    config = CompressionConfig(max_tokens=args.max_tokens, msg_threshold=100)
    app = msgspec.structs.replace(bench_config(compression=True), compression=config)
    view = conversation(0, args.stall_messages, ["Mara paid 420 EUR on Tuesday."])
    request = CompressRequest(agent="bench", messages=view, version=0)
    stalls: list[float] = []
    idle: list[float] = []
    took: list[float] = []
    returned: list[float] = []
    timed = msgspec.structs.replace(config, timeout=args.timeout)
    async with MemoryRuntime(app) as rt:
        for run in range(args.stall_runs):
            step(f"stalls: compression {run + 1} of {args.stall_runs}, then the loop idle as long")
            t0 = time.perf_counter()
            stalls.append(await _stall(rt, request, 0.0))
            took.append(time.perf_counter() - t0)
            idle.append(await _stall(rt, None, took[-1]))
        step(f"{args.stall_runs} compressions with a timeout of {args.timeout:g} s")
        for _ in range(args.stall_runs):
            t0 = time.perf_counter()
            await compress(
                view, config=timed, counter=counter, summarizer=OfflineSummarizer(counter)
            )
            returned.append(time.perf_counter() - t0)
    n = args.stall_messages
    return [
        compared(
            f"longest stall of another task during a {n:,}-message compression (worst of runs)",
            max(stalls) * 1e3,
            "ms",
            "the same ticker while the loop is idle as long",
            max(idle) * 1e3,
            target="<= ~20 ms",
            extra={
                "stalls_ms": [x * 1e3 for x in stalls],
                "compression_ms": [x * 1e3 for x in took],
            },
        ),
        compared(
            f"a {n:,}-message compression with timeout {args.timeout:g} s returns after (worst)",
            max(returned) * 1e3,
            "ms",
            "the timeout",
            args.timeout * 1e3,
            extra={"returned_ms": [x * 1e3 for x in returned]},
        ),
    ]


async def run(args: argparse.Namespace) -> list[Row]:
    counter = get_counter()
    config = CompressionConfig(max_tokens=args.max_tokens, msg_threshold=100)
    summarizer = OfflineSummarizer(counter)
    names = agent_names(args.conversations)
    facts = plant_facts(names, 3, seed=7)
    saved: list[float] = []
    latencies: list[float] = []
    kept_in_view = reachable = planted = 0
    plan(len(names) + args.stall_runs + 1)
    for n, name in enumerate(names):
        step(f"conversation {n + 1} of {len(names)}")
        mine = [f for f in facts if f.agent == name]
        view = conversation(n, args.messages, [f.statement for f in mine])
        t0 = time.perf_counter()
        outcome = await compress(view, config=config, counter=counter, summarizer=summarizer)
        latencies.append(time.perf_counter() - t0)
        saved.append(outcome.tokens_saved / max(1, outcome.tokens_before))
        text = "\n".join(m.text() for m in outcome.messages)
        offloaded = "\n".join(m.text() for ms in outcome.offloaded.values() for m in ms)
        for fact in mine:
            planted += 1
            kept_in_view += fact.answer in text
            reachable += fact.answer in text or fact.answer in offloaded
    rows = recorded_rows()
    rows += [
        Row(name="tokens saved (share of the view)", value=100 * sum(saved) / len(saved), unit="%"),
        Row(
            name="planted facts kept in the compressed view",
            value=100 * kept_in_view / planted,
            unit="%",
        ),
        Row(
            name="planted facts reachable (view or reload)",
            value=100 * reachable / planted,
            unit="%",
        ),
        Row(name="compression latency p50", value=percentile(latencies, 50) * 1e3, unit="ms"),
        Row(name="compression latency p99", value=percentile(latencies, 99) * 1e3, unit="ms"),
    ]
    rows += await stall_rows(args)
    return rows
