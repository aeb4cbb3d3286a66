"""In-process ask round trips (context() and add): p50/p95/p99 at 50% and 90% of the peak.

The peak is measured closed loop (``--concurrency`` askers back to back); each
level then runs open loop: asks leave on schedule, each in a task of its own,
whatever the replies do, and a round trip is timed from when its ask was due, so
a sender that falls behind counts its lateness instead of hiding it.

The raw baseline runs at each of the same rates just before: a request/reply round
trip through an anyio memory object stream to one responder task, which answers
each request by setting its future (the least an ask through a mailbox costs). A
percentile is compared with the baseline's only where the baseline kept up with
the rate; a level either side could not keep up with is marked ``over capacity``
(its figures then measure a queue).

In process, the sender shares the event loop and the cores with what it measures,
so a level's tails say as much about the sender and the machine as about the runtime.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import NamedTuple

import anyio

from actormem.actors import MemoryRuntime, Message
from actormem.actors.config import MemoryConfig
from actormem.actors.memory.commands import Add, Context
from actormem.actors.memory.exchange import counted_add, sender_config
from actormem.benchmarks._common import (
    Row,
    above,
    at_least,
    bench_config,
    compared,
    message_texts,
    percentile,
    plan,
    process_cpu,
    recorded_rows,
    step,
)
from actormem.runtime import ActormemError

__all__ = (
    "NAME",
    "SUSTAINED",
    "Baseline",
    "CpuClock",
    "Level",
    "add_arguments",
    "measure",
    "metered",
    "open_loop",
    "peak_rate",
    "raw_anyio_asker",
    "run",
)

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


#: A level whose asks are answered at less than this share of the offered rate is
#: over capacity: its asks queue, and its percentiles measure the queue.
SUSTAINED = 0.9


class Level(NamedTuple):
    """What one open-loop level measured."""

    samples: list[float]  #: each answered ask's round trip (s), from when it was due
    failed: int  #: asks that failed (timed out, say)
    answered: float  #: asks answered per second, from the first due to the last answer


async def open_loop(ask: Callable[[int], Awaitable[object]], rate: float, seconds: float) -> Level:
    """Send ``rate`` asks per second for ``seconds``, each in a task of its own.

    A round trip is timed from when its ask was due, not from when its task got
    to run: a sender that falls behind (the event loop busy with earlier asks)
    adds its lateness to the figures instead of hiding it.
    """
    samples: list[float] = []
    failed = 0
    interval = 1.0 / rate
    total = max(1, int(rate * seconds))

    async def one(i: int, due: float) -> None:
        nonlocal failed
        try:
            await ask(i)
        except ActormemError:
            failed += 1
            return
        samples.append(time.perf_counter() - due)

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for i in range(total):
            due = start + i * interval
            await anyio.sleep(max(0.0, due - time.perf_counter()))  # a checkpoint when late
            tg.start_soon(one, i, due)
    return Level(samples, failed, len(samples) / (time.perf_counter() - start))


#: The CPU seconds each process of a round trip has used so far, by its role
#: (``client``, ``worker``...): read before and after a level.
CpuClock = Callable[[], dict[str, float]]


class Baseline(NamedTuple):
    """The raw round trip a benchmark compares its asks with, at the same rates."""

    name: str
    ask: Callable[[int], Awaitable[object]]
    cpu: CpuClock | None = None


async def metered(
    ask: Callable[[int], Awaitable[object]], rate: float, seconds: float, cpu: CpuClock | None
) -> tuple[Level, dict[str, float] | None]:
    """:func:`open_loop`, and the CPU each process of ``cpu`` used meanwhile per
    answered ask (µs, by role; None without ``cpu``)."""
    before = cpu() if cpu is not None else None
    level = await open_loop(ask, rate, seconds)
    if cpu is None or before is None:
        return level, None
    after = cpu()
    answered = max(1, len(level.samples))
    return level, {role: (after[role] - before[role]) / answered * 1e6 for role in before}


async def measure(
    rt: MemoryRuntime,
    where: str,
    args: argparse.Namespace,
    baseline: Baseline,
    fixed_rate: float = 0.0,
    settle: Callable[[], Awaitable[None]] | None = None,
    on_level: Callable[[str, float, float], None] | None = None,
    cpu: CpuClock | None = None,
) -> list[Row]:
    """Peak, then p50/p95/p99 at 50% and 90% of it (and at ``fixed_rate`` if given),
    of ``context()`` and ``add`` asks to ``args.agents`` agents of ``rt``; each level
    next to ``baseline`` at the same rate, measured just before it. The rows go to
    :func:`recorded_rows` as each level finishes.

    A percentile has a baseline only where the baseline kept up with the rate (its
    closed-loop peak above it, and its asks answered at :data:`SUSTAINED` of it at
    least); elsewhere the baseline's figures would measure its queue, and a row
    says how fast it answered instead. A level at which actormem did not keep up
    says so in its rows' names (``over capacity``).

    ``where`` names the transport in the row names (``in-process``, ``Redis``);
    ``settle`` waits after each level until what timed-out asks left queued is
    handled, so it does not weigh on the next level. ``on_level`` hears of each
    level of actormem's asks: its name (``add at 90% of peak``) and when it started
    and ended (wall clock). With ``cpu`` (and the baseline's), each level adds a row
    of the CPU its processes used per answered ask, next to the baseline's.
    """
    rows = recorded_rows()
    texts = message_texts(1000)
    addresses = [f"memory/agent{i}" for i in range(args.agents)]
    levels_per_ask = 3 if fixed_rate else 2
    plan(2 + 2 * (1 + 2 * levels_per_ask))
    step("filling the agents")
    for a in addresses:  # each agent holds a short conversation
        await rt.ask(a, Add(messages=[Message(role="user", content=t) for t in texts[:20]]))

    async def ask_context(i: int) -> object:
        return await rt.ask(addresses[i % len(addresses)], Context(max_tokens=4096))

    config = sender_config(rt) or MemoryConfig()

    async def ask_add(i: int) -> object:
        # As a memory handle sends it: the message's tokens counted by the asker.
        msg = Message(role="user", content=texts[i % len(texts)])
        return await rt.ask(addresses[i % len(addresses)], counted_add("add", msg, config))

    step(f"{baseline.name}: peak")
    raw_peak = await peak_rate(baseline.ask, args.seconds, args.concurrency)
    rows.append(Row(name=f"{baseline.name} peak (closed loop)", value=raw_peak, unit="ask/s"))
    for label, ask in (("context()", ask_context), ("add", ask_add)):
        step(f"{label}: peak")
        peak = await peak_rate(ask, args.seconds, args.concurrency)
        rows.append(
            compared(f"{where} {label} peak (closed loop)", peak, "ask/s", baseline.name, raw_peak)
        )
        levels: list[tuple[str, float, str | None]] = [
            (f"at {share:.0%} of peak", peak * share, None) for share in (0.5, 0.9)
        ]
        if fixed_rate:
            levels.append((f"at {fixed_rate:,.0f}/s", fixed_rate, "<= 3x raw"))
        for level, rate, target in levels:
            step(f"{label} {level} ({rate:,.0f}/s): {baseline.name}")
            raw, raw_cpu = (
                (None, None)
                if rate >= raw_peak
                else await metered(baseline.ask, rate, args.seconds, baseline.cpu)
            )
            step(f"{label} {level} ({rate:,.0f}/s): actormem")
            began = time.time()
            ours, our_cpu = await metered(ask, rate, args.seconds, cpu)
            if on_level is not None:
                on_level(f"{label} {level}", began, time.time())
            if settle is not None:
                await settle()
            raw_kept_up = raw is not None and raw.answered >= SUSTAINED * rate
            kept_up = ours.answered >= SUSTAINED * rate
            over = "" if kept_up else " (over capacity)"
            for p in (50, 95, 99):
                value = percentile(ours.samples, p) * 1e3
                theirs = percentile(raw.samples, p) * 1e3 if raw and raw_kept_up else None
                rows.append(
                    Row(
                        name=f"{where} {label} p{p} {level}{over}",
                        value=value,
                        unit="ms",
                        baseline=baseline.name if theirs else None,
                        baseline_value=theirs,
                        ratio=value / theirs if theirs else None,
                        target=target if p == 99 else None,
                        extra={
                            "raw_sustained": raw_kept_up,
                            "sustained": kept_up,
                            "rate": rate,
                            "answered_rate": ours.answered,
                            "samples": len(ours.samples),
                            "failed": ours.failed,
                            "percentile": p,
                            "ask": label,
                            "transport": where,
                            "share_of_peak": rate / peak,
                        },
                    )
                )
            if our_cpu is not None:
                rows.append(
                    _cpu_row(
                        f"{where} {label} CPU per ask {level}{over}",
                        our_cpu,
                        baseline.name,
                        raw_cpu,
                        rate,
                    )
                )
            if not raw_kept_up:
                # What the baseline can answer at most: why it has no figures here.
                most, how = (
                    (raw_peak, "its closed-loop peak")
                    if raw is None
                    else (
                        raw.answered,
                        "answered at this level",
                    )
                )
                rows.append(
                    Row(
                        name=f"{baseline.name} {level} ({rate:,.0f}/s offered, beside {label}): "
                        f"{how}, too few, so no baseline",
                        value=most,
                        unit="ask/s",
                        extra={"rate": rate, "raw_sustained": False},
                    )
                )
            if ours.failed:
                rows.append(
                    Row(name=f"{where} {label} asks failed {level}", value=ours.failed, unit="asks")
                )
    return rows


def _cpu_row(
    name: str,
    ours: dict[str, float],
    baseline: str,
    theirs: dict[str, float] | None,
    rate: float,
) -> Row:
    """The CPU per answered ask of a level's processes, summed, next to the baseline's
    at the same rate (when it ran)."""
    value = sum(ours.values())
    raw = sum(theirs.values()) if theirs else None
    return Row(
        name=name,
        value=value,
        unit="us",
        baseline=baseline if raw else None,
        baseline_value=raw,
        ratio=value / raw if raw else None,
        extra={"rate": rate, "by_process": ours, "baseline_by_process": theirs},
    )


async def run(args: argparse.Namespace) -> list[Row]:
    """In-process asks (see :func:`measure`), next to the raw anyio round trip."""
    async with MemoryRuntime(bench_config()) as rt, raw_anyio_asker() as raw:
        here = _this_process
        baseline = Baseline("raw anyio round trip", raw, here)
        return await measure(rt, "in-process", args, baseline, cpu=here)


def _this_process() -> dict[str, float]:
    return {"process": process_cpu()}


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
