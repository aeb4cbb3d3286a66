"""Scale: resident memory per idle agent actor at 1,000 / 10,000 / 100,000 agents, next to
a raw anyio task with its own stream per agent. Each size runs in a fresh process."""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
from pathlib import Path

import anyio

from actors import MemoryRuntime, Message
from actors.commands import Add
from benchmarks._common import BenchResult, Row, bench_config, rss_bytes, wait_processed
from benchmarks._plots import memory_plot

NAME = "scale"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--agents", type=int, nargs="+", default=[1_000, 10_000, 100_000], help="agent counts"
    )
    parser.add_argument("--child", choices=("actormem", "anyio"), help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)


async def _child_actormem(n: int) -> float:
    async with MemoryRuntime(bench_config()) as rt:
        await rt.ask("memory/warm", Add(messages=[Message(role="user", content="warm up")]))
        gc.collect()
        before = rss_bytes()
        for i in range(n):
            # One short message each: an agent that has spoken once and is now idle.
            await rt.tell(f"memory/a{i}", Add(messages=[Message(role="user", content="hello")]))
        await wait_processed(rt, n + 1, poll=0.01)
        gc.collect()
        return (rss_bytes() - before) / n


async def _child_anyio(n: int) -> float:
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
    return per


def _measure(kind: str, n: int) -> float:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "scale", "--child", kind, "--n", str(n)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["per_agent"])


async def run(args: argparse.Namespace) -> list[Row]:
    if args.child:
        fn = _child_actormem if args.child == "actormem" else _child_anyio
        print(json.dumps({"per_agent": await fn(args.n)}))
        raise SystemExit(0)
    rows = []
    for n in args.agents:
        raw = _measure("anyio", n)
        ours = _measure("actormem", n)
        rows.append(
            Row(
                name=f"raw anyio task + stream per agent, {n:,}",
                value=raw,
                unit="B",
                extra={"agents": n},
            )
        )
        rows.append(
            Row(
                name=f"actormem idle agent (1 message), {n:,} agents",
                value=ours,
                unit="B",
                baseline="raw anyio task",
                baseline_value=raw,
                ratio=ours / raw,
                target="< 4 KB" if n == 100_000 else None,
                extra={"agents": n},
            )
        )
    return rows


def plot(result: BenchResult, out_dir: Path) -> list[Path]:
    """Draw ``memory.png`` (see :func:`benchmarks._plots.memory_plot`)."""
    return memory_plot(result, out_dir)
