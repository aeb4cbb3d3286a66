"""Load: a steady or stepped open-loop load of memory commands, with a live display,
reporting throughput, latency percentiles, errors and mailbox depths over time."""

from __future__ import annotations

import argparse
import time
from typing import Any

import anyio
from rich.console import Console
from rich.live import Live
from rich.table import Table

from actors import MemoryRuntime, Message
from actors.commands import Add, Context
from benchmarks._common import Row, bench_config, message_texts, percentile
from runtime import ActormemError

NAME = "load"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--agents", type=int, default=1_000, help="agents the load spreads over")
    parser.add_argument("--rate", type=float, default=2_000.0, help="commands per second")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of load")
    parser.add_argument(
        "--step", type=float, default=0.0, help="add this many commands/s every --step-every s"
    )
    parser.add_argument("--step-every", type=float, default=2.0, help="seconds per load step")
    parser.add_argument(
        "--mix", type=float, default=0.2, help="share of context() asks (the rest are adds)"
    )
    parser.add_argument("--mailbox", type=int, default=1_000, help="mailbox size per agent")
    parser.add_argument("--quiet", action="store_true", help="no live display")


class _Second:
    """What happened in one second of the run."""

    def __init__(self, t: int, rate: float) -> None:
        self.t = t
        self.rate = rate
        self.sent = 0
        self.done = 0
        self.errors = 0
        self.latencies: list[float] = []
        self.depth = 0
        self.max_depth = 0

    def row(self) -> dict[str, Any]:
        return {
            "t": self.t,
            "target_rate": round(self.rate, 1),
            "sent": self.sent,
            "done": self.done,
            "errors": self.errors,
            "p50_ms": round(percentile(self.latencies, 50) * 1e3, 3) if self.latencies else None,
            "p99_ms": round(percentile(self.latencies, 99) * 1e3, 3) if self.latencies else None,
            "mailbox_depth": self.depth,
            "max_mailbox_depth": self.max_depth,
        }


def _table(seconds: list[_Second]) -> Table:
    table = Table(title="load (last 10 s)", title_justify="left")
    for col in ("t", "target/s", "done/s", "errors", "p50 ms", "p99 ms", "mailbox depth"):
        table.add_column(col, justify="right")
    for s in seconds[-10:]:
        r = s.row()
        table.add_row(
            str(r["t"]),
            f"{r['target_rate']:,.0f}",
            f"{r['done']:,}",
            str(r["errors"]),
            f"{r['p50_ms']}" if r["p50_ms"] is not None else "-",
            f"{r['p99_ms']}" if r["p99_ms"] is not None else "-",
            f"{r['mailbox_depth']:,} (max {r['max_mailbox_depth']:,})",
        )
    return table


async def run(args: argparse.Namespace) -> list[Row]:
    texts = message_texts(2_000)
    config = bench_config(mailbox_size=args.mailbox)
    seconds: list[_Second] = []
    all_latencies: list[float] = []
    errors: dict[str, int] = {}
    console = Console(stderr=True)
    async with MemoryRuntime(config) as rt:
        addresses = [f"memory/load{i}" for i in range(args.agents)]

        async def one(i: int, bucket: _Second) -> None:
            address = addresses[i % len(addresses)]
            if (i % 100) < args.mix * 100:
                command: Any = Context(max_tokens=2_000)
            else:
                command = Add(messages=[Message(role="user", content=texts[i % len(texts)])])
            t0 = time.perf_counter()
            try:
                await rt.ask(address, command, timeout=30)
            except ActormemError as exc:
                bucket.errors += 1
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                return
            latency = time.perf_counter() - t0
            bucket.done += 1
            bucket.latencies.append(latency)
            all_latencies.append(latency)

        started = time.perf_counter()
        live = Live(_table(seconds), console=console, refresh_per_second=2, transient=False)
        with live if not args.quiet else _Null():
            async with anyio.create_task_group() as tg:
                i = 0
                next_at = started
                while (now := time.perf_counter()) - started < args.duration:
                    t = int(now - started)
                    rate = args.rate + args.step * int((now - started) / args.step_every)
                    if not seconds or seconds[-1].t != t:
                        if seconds:
                            stats = rt.stats()
                            seconds[-1].depth = stats.mailbox_depth
                            seconds[-1].max_depth = stats.max_mailbox_depth
                            if not args.quiet:
                                live.update(_table(seconds))
                        seconds.append(_Second(t, rate))
                    bucket = seconds[-1]
                    while next_at <= now:
                        tg.start_soon(one, i, bucket)
                        bucket.sent += 1
                        i += 1
                        next_at += 1.0 / rate
                    await anyio.sleep(max(0.0, next_at - time.perf_counter()))
            elapsed = time.perf_counter() - started
            if not args.quiet:
                live.update(_table(seconds))
        sent = sum(s.sent for s in seconds)
        done = sum(s.done for s in seconds)
    rows = [
        Row(name="commands sent", value=sent, unit="", extra={"errors": errors}),
        Row(name="throughput (completed)", value=done / elapsed, unit="cmd/s"),
        Row(name="errors", value=sum(errors.values()), unit=""),
        Row(name="redeliveries (in-process: none by design)", value=0, unit=""),
    ]
    for p in (50, 95, 99):
        rows.append(Row(name=f"latency p{p}", value=percentile(all_latencies, p) * 1e3, unit="ms"))
    rows.append(
        Row(
            name="mailbox depth, deepest seen",
            value=max((s.max_depth for s in seconds), default=0),
            unit="msgs",
            extra={"series": [s.row() for s in seconds]},
        )
    )
    return rows


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
