"""Resident memory per idle in-process agent at 1,000 to 100,000 agents, next to a raw anyio task.

Memory per idle agent actor at 1,000 / 10,000 / 100,000 agents, next to a raw
anyio task with its own stream per agent. Each size runs in a fresh process.

Also the pause of a full garbage collection (``gc.collect()``) with that many agents
in memory, and, at the largest size, the same with ``runtime.gc_freeze`` off: what
the collector walks is what the latency tail pays for.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time

import anyio
import msgspec

from actormem.actors import MemoryRuntime, Message
from actormem.actors.memory.commands import Add
from actormem.benchmarks._common import (
    Row,
    at_least,
    bench_config,
    child_json,
    compared,
    plan,
    recorded_rows,
    rss_bytes,
    step,
    wait_processed,
)

__all__ = (
    "NAME",
    "add_arguments",
    "run",
)

NAME = "scale"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--agents",
        type=at_least(1),
        nargs="+",
        default=[1_000, 10_000, 100_000],
        help="agent counts",
    )
    parser.add_argument(
        "--child", choices=("actormem", "actormem-nofreeze", "anyio"), help=argparse.SUPPRESS
    )
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)


async def _child_actormem(n: int, freeze: bool = True) -> dict[str, float]:
    config = bench_config()
    config = msgspec.structs.replace(
        config, runtime=msgspec.structs.replace(config.runtime, gc_freeze=freeze)
    )
    async with MemoryRuntime(config) as rt:
        await rt.ask("memory/warm", Add(messages=[Message(role="user", content="warm up")]))
        gc.collect()
        before = rss_bytes()
        for i in range(n):
            # One short message each: an agent that has spoken once and is now idle.
            await rt.tell(f"memory/a{i}", Add(messages=[Message(role="user", content="hello")]))
        await wait_processed(rt, n + 1, poll=0.01)
        gc.collect()
        per_agent = (rss_bytes() - before) / n
        pauses = []
        for _ in range(5):
            started = time.perf_counter()
            gc.collect()
            pauses.append(time.perf_counter() - started)
        return {"per_agent": per_agent, "gc_pause": statistics.median(pauses)}


async def _child_anyio(n: int) -> dict[str, float]:
    gc.collect()
    before = rss_bytes()
    async with anyio.create_task_group() as tg:
        senders = []
        for _ in range(n):
            send, receive = anyio.create_memory_object_stream[str](100)
            senders.append(send)

            async def drain(r: anyio.abc.ObjectReceiveStream[str] = receive) -> None:
                async for _ in r:
                    pass

            tg.start_soon(drain)
        await anyio.sleep(0.5)
        gc.collect()
        per = (rss_bytes() - before) / n
        tg.cancel_scope.cancel()
    return {"per_agent": per}


async def _measure(kind: str, n: int) -> dict[str, float]:
    return await child_json(["scale", "--child", kind, "--n", str(n)], timeout=600)


async def run(args: argparse.Namespace) -> list[Row]:
    if args.child:
        if args.child == "anyio":
            print(json.dumps(await _child_anyio(args.n)))
        else:
            print(json.dumps(await _child_actormem(args.n, args.child == "actormem")))
        raise SystemExit(0)
    rows = recorded_rows()
    plan(2 * len(args.agents) + 1)
    for n in args.agents:
        step(f"{n:,} agents: raw anyio tasks (a process of its own)")
        raw = (await _measure("anyio", n))["per_agent"]
        step(f"{n:,} agents: actormem (a process of its own)")
        measured = await _measure("actormem", n)
        ours = measured["per_agent"]
        rows.append(
            Row(
                name=f"raw anyio task + stream per agent, {n:,}",
                value=raw,
                unit="B",
                extra={"agents": n},
            )
        )
        rows.append(
            compared(
                f"actormem idle agent (1 message), {n:,} agents",
                ours,
                "B",
                "raw anyio task",
                raw,
                target="< 4 KB" if n == 100_000 else None,
                extra={"agents": n},
            )
        )
        unfrozen = None
        if n == max(args.agents):
            step(f"{n:,} agents: actormem with gc_freeze = false")
            unfrozen = await _measure("actormem-nofreeze", n)
        rows.append(
            Row(
                name=f"full gc.collect() pause, {n:,} idle agents",
                value=measured["gc_pause"] * 1e3,
                unit="ms",
                baseline=None if unfrozen is None else "the same, gc_freeze = false",
                baseline_value=None if unfrozen is None else unfrozen["gc_pause"] * 1e3,
                ratio=None if unfrozen is None else measured["gc_pause"] / unfrozen["gc_pause"],
                extra={"agents": n},
            )
        )
    return rows
