"""Latency: p50/p95/p99 of ``ask`` round trips (``context()`` and ``add``) at 50% and 90%
of the measured peak rate, open loop (requests leave on schedule, whatever the replies do).

The raw baseline runs at each of the same rates just before: a request/reply round
trip through an anyio memory object stream to one responder task, which answers
each request by setting its future (the least an ask through a mailbox costs).

In process, the open-loop sender (a task per ask) shares the event loop with what
it measures: at tens of thousands of asks/s its own tasks queue, and the tails
say as much about it as about the runtime (on 2 cores, the raw round trip, about
160,000/s closed loop, can queue for seconds at 38,000/s open loop).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import NamedTuple

import anyio

from actormem.actors import MemoryRuntime, Message
from actormem.actors.memory.commands import Add, Context
from actormem.benchmarks._common import (
    BenchResult,
    Row,
    above,
    at_least,
    bench_config,
    compared,
    message_texts,
    percentile,
)
from actormem.benchmarks._plots import latency_plot
from actormem.runtime import ActormemError

NAME = "latency"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--agents", type=at_least(1), default=100, help="agents asked in turn")
    parser.add_argument("--seconds", type=above(0), default=3.0, help="seconds per load level")
    parser.add_argument(
        "--concurrency", type=at_least(1), default=32, help="askers when finding peak"
    )


async def peak_rate(ask: Callable[[int], Awaitable[object]], seconds: float, workers: int) -> float:
    """Closed loop: ``workers`` askers back to back; asks per second."""
    done = 0
    deadline = time.perf_counter() + seconds

    async def worker(w: int) -> None:
        nonlocal done
        i = w
        while time.perf_counter() < deadline:
            await ask(i)
            done += 1
            i += workers

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for w in range(workers):
            tg.start_soon(worker, w)
    return done / (time.perf_counter() - started)


async def open_loop(
    ask: Callable[[int], Awaitable[object]], rate: float, seconds: float
) -> tuple[list[float], int]:
    """Send ``rate`` asks per second for ``seconds``.

    Returns:
        Each answered ask's round trip in seconds, and how many asks failed
        (timed out, say: a rate above the peak queues until asks time out).
    """
    samples: list[float] = []
    failed = 0
    interval = 1.0 / rate
    total = int(rate * seconds)

    async def one(i: int) -> None:
        nonlocal failed
        t0 = time.perf_counter()
        try:
            await ask(i)
        except ActormemError:
            failed += 1
            return
        samples.append(time.perf_counter() - t0)

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for i in range(total):
            delay = start + i * interval - time.perf_counter()
            if delay > 0:
                await anyio.sleep(delay)
            tg.start_soon(one, i)
    return samples, failed


class Baseline(NamedTuple):
    """The raw round trip a benchmark compares its asks with, at the same rates."""

    name: str
    ask: Callable[[int], Awaitable[object]]


async def measure(
    rt: MemoryRuntime,
    where: str,
    args: argparse.Namespace,
    baseline: Baseline,
    fixed_rate: float = 0.0,
    settle: Callable[[], Awaitable[None]] | None = None,
) -> list[Row]:
    """Peak, then p50/p95/p99 at 50% and 90% of it (and at ``fixed_rate`` if given),
    of ``context()`` and ``add`` asks to ``args.agents`` agents of ``rt``; each level
    next to ``baseline`` at the same rate, measured just before it. The baseline's
    own peak is measured first: a rate at or above it would only measure its queue,
    so such a level has no baseline (``extra["over_raw_peak"]``).

    ``where`` names the transport in the row names (``in-process``, ``Redis``);
    ``settle`` waits after each level until what timed-out asks left queued is
    handled, so it does not weigh on the next level.
    """
    rows: list[Row] = []
    texts = message_texts(1000)
    addresses = [f"memory/agent{i}" for i in range(args.agents)]
    for a in addresses:  # each agent holds a short conversation
        await rt.ask(a, Add(messages=[Message(role="user", content=t) for t in texts[:20]]))

    async def ask_context(i: int) -> object:
        return await rt.ask(addresses[i % len(addresses)], Context(max_tokens=4096))

    async def ask_add(i: int) -> object:
        msg = Message(role="user", content=texts[i % len(texts)])
        return await rt.ask(addresses[i % len(addresses)], Add(messages=[msg]))

    raw_peak = await peak_rate(baseline.ask, args.seconds, args.concurrency)
    rows.append(Row(name=f"{baseline.name} peak (closed loop)", value=raw_peak, unit="ask/s"))
    for label, ask in (("context()", ask_context), ("add", ask_add)):
        peak = await peak_rate(ask, args.seconds, args.concurrency)
        rows.append(
            compared(f"{where} {label} peak (closed loop)", peak, "ask/s", baseline.name, raw_peak)
        )
        levels: list[tuple[str, float, str | None]] = [
            (f"at {share:.0%} of peak", peak * share, None) for share in (0.5, 0.9)
        ]
        if fixed_rate:
            levels.append((f"at {fixed_rate:,.0f}/s", fixed_rate, "< 2 ms at 5k/s"))
        for level, rate, target in levels:
            over = rate >= raw_peak
            raw = [] if over else (await open_loop(baseline.ask, rate, args.seconds))[0]
            samples, failed = await open_loop(ask, rate, args.seconds)
            if settle is not None:
                await settle()
            for p in (50, 95, 99):
                ours = percentile(samples, p) * 1e3
                theirs = None if over else percentile(raw, p) * 1e3
                rows.append(
                    Row(
                        name=f"{where} {label} p{p} {level}",
                        value=ours,
                        unit="ms",
                        baseline=None if over else baseline.name,
                        baseline_value=theirs,
                        ratio=ours / theirs if theirs else None,
                        target=target if p == 99 else None,
                        extra={
                            "over_raw_peak": over,
                            "rate": rate,
                            "samples": len(samples),
                            "failed": failed,
                            "percentile": p,
                            "ask": label,
                            "transport": where,
                            "share_of_peak": rate / peak,
                        },
                    )
                )
            if failed:
                rows.append(
                    Row(name=f"{where} {label} asks failed {level}", value=failed, unit="asks")
                )
    return rows


async def run(args: argparse.Namespace) -> list[Row]:
    """In-process asks (see :func:`measure`), next to the raw anyio round trip."""
    async with MemoryRuntime(bench_config()) as rt, raw_anyio_asker() as raw:
        return await measure(rt, "in-process", args, Baseline("raw anyio round trip", raw))


@asynccontextmanager
async def raw_anyio_asker() -> AsyncIterator[Callable[[int], Awaitable[object]]]:
    """The raw in-process baseline: asks through a memory object stream to one task."""
    send, receive = anyio.create_memory_object_stream[tuple[int, asyncio.Future[int]]](1_000)

    async def respond() -> None:
        async with receive:
            async for request, future in receive:
                if not future.done():
                    future.set_result(request)

    async def ask(i: int) -> object:
        future = asyncio.get_running_loop().create_future()
        await send.send((i, future))
        return await future

    async with anyio.create_task_group() as tg, send:
        tg.start_soon(respond)
        yield ask
        tg.cancel_scope.cancel()


def plot(result: BenchResult, out_dir: Path) -> list[Path]:
    """Draw ``latency.png`` (see :func:`actormem.benchmarks._plots.latency_plot`)."""
    return latency_plot(result, out_dir)
