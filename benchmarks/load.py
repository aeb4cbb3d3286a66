"""Load: a steady or stepped open-loop load of memory commands, with a live display,
reporting throughput, latency percentiles, errors, redeliveries and mailbox depths over time.

``--transport redis`` runs against a private ``redis-server``: with ``--workers N``
(N >= 1) the load comes from a client runtime here and N worker processes host
the agents, and the depths are the shard streams' backlog (entries not yet read
by the workers, and read but not yet acked); with ``--workers 0`` this process is
the worker, and its mailboxes are reported too.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
from rich.console import Console
from rich.live import Live
from rich.table import Table

from actors import MemoryRuntime, Message
from actors.commands import Add, Context
from benchmarks._common import (
    Row,
    above,
    at_least,
    bench_config,
    fraction,
    message_texts,
    percentile,
)
from benchmarks._redis import (
    client_runtime,
    redelivered_pending,
    redis_app_config,
    server,
    stream_backlog,
    worker_runtime,
    workers,
)
from runtime import ActormemError
from runtime.redis import Keys, connect

NAME = "load"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--agents", type=at_least(1), default=1_000, help="agents the load spreads over"
    )
    parser.add_argument("--rate", type=above(0), default=2_000.0, help="commands per second")
    parser.add_argument("--duration", type=above(0), default=10.0, help="seconds of load")
    parser.add_argument(
        "--step",
        type=at_least(0.0, float),
        default=0.0,
        help="add this many commands/s every --step-every s",
    )
    parser.add_argument("--step-every", type=above(0), default=2.0, help="seconds per load step")
    parser.add_argument(
        "--mix", type=fraction, default=0.2, help="share of context() asks (the rest are adds)"
    )
    parser.add_argument("--mailbox", type=at_least(1), default=1_000, help="mailbox size per agent")
    parser.add_argument(
        "--timeout", type=above(0), default=30.0, help="seconds each ask waits for its reply"
    )
    parser.add_argument(
        "--max-inflight",
        type=at_least(0),
        default=5_000,
        help="asks in flight at most: a command due while this many wait is not sent "
        "(counted as skipped), as a client with a bounded pool would (0: no bound)",
    )
    parser.add_argument(
        "--no-shed",
        action="store_true",
        help="handle asks whose asker gave up (runtime.shed_expired_asks = false)",
    )
    parser.add_argument("--quiet", action="store_true", help="no live display")
    parser.add_argument(
        "--transport", choices=("memory", "redis"), default="memory", help="where the agents run"
    )
    parser.add_argument(
        "--workers", type=at_least(0), default=1, help="Redis worker processes (0: this process)"
    )


class _Second:
    """What happened in one second of the run."""

    def __init__(self, t: int, rate: float) -> None:
        self.t = t
        self.rate = rate
        self.sent = 0
        self.done = 0
        self.errors = 0
        self.skipped = 0
        self.latencies: list[float] = []
        self.gauges: dict[str, int] = {}

    def row(self) -> dict[str, Any]:
        return {
            "t": self.t,
            "target_rate": round(self.rate, 1),
            "sent": self.sent,
            "done": self.done,
            "errors": self.errors,
            "skipped": self.skipped,
            "p50_ms": round(percentile(self.latencies, 50) * 1e3, 3) if self.latencies else None,
            "p99_ms": round(percentile(self.latencies, 99) * 1e3, 3) if self.latencies else None,
            **self.gauges,
        }


#: Column names of the gauges in the live table.
_SHORT = {
    "mailbox_depth": "mailbox",
    "max_mailbox_depth": "max mbox",
    "stream_waiting": "unread",
    "stream_pending": "unacked",
    "redelivered": "redeliv",
    "redelivered_pending": "redeliv pend",
    "dead_letters": "dlq",
    "client_outbox": "c.outbox",
    "client_asks": "c.asks",
}


def _table(seconds: list[_Second]) -> Table:
    table = Table(title="load (last 10 s)", title_justify="left")
    gauges = list(seconds[-2].gauges) if len(seconds) > 1 else []
    for col in ("t", "target/s", "done/s", "errors", "skipped", "p50 ms", "p99 ms", *gauges):
        table.add_column(_SHORT.get(col, col), justify="right")
    for s in seconds[-10:]:
        r = s.row()
        table.add_row(
            str(r["t"]),
            f"{r['target_rate']:,.0f}",
            f"{r['done']:,}",
            f"{r['errors']:,}",
            f"{r['skipped']:,}",
            f"{r['p50_ms']:,.1f}" if r["p50_ms"] is not None else "-",
            f"{r['p99_ms']:,.1f}" if r["p99_ms"] is not None else "-",
            *(f"{s.gauges[g]:,}" if g in s.gauges else "-" for g in gauges),
        )
    return table


Gauges = Callable[[], Awaitable[dict[str, int]]]


def _mailboxes(rt: MemoryRuntime) -> dict[str, int]:
    stats = rt.stats()
    return {
        "mailbox_depth": stats.mailbox_depth,
        "max_mailbox_depth": stats.max_mailbox_depth,
        "expired": stats.expired,
    }


@asynccontextmanager
async def _target(args: argparse.Namespace) -> AsyncIterator[tuple[MemoryRuntime, Gauges]]:
    """The runtime the load goes to, and how to read its depths and redeliveries."""
    if args.transport == "memory":
        config = bench_config(mailbox_size=args.mailbox, shed=not args.no_shed)
        async with MemoryRuntime(config) as rt:

            async def gauges() -> dict[str, int]:
                return _mailboxes(rt)

            yield rt, gauges
        return
    async with server() as redis:
        config = redis_app_config(redis.url, mailbox_size=args.mailbox, shed=not args.no_shed)
        client = connect(config.redis)
        try:
            async with AsyncExitStack() as stack:
                if args.workers:
                    await stack.enter_async_context(workers(config, args.workers))
                    rt, transport = await stack.enter_async_context(client_runtime(config))
                else:
                    rt = await stack.enter_async_context(worker_runtime(config))
                    transport = rt.transport

                async def redis_gauges() -> dict[str, int]:
                    waiting, pending = await stream_backlog(client, config)
                    found = {"stream_waiting": waiting, "stream_pending": pending}
                    if args.workers:
                        found["redelivered_pending"] = await redelivered_pending(client, config)
                        mine = transport.stats()
                        found["client_outbox"] = mine.outbox
                        found["client_asks"] = mine.pending_asks
                    else:
                        found.update(_mailboxes(rt))
                        found["redelivered"] = transport.stats().redelivered
                    dead = Keys(config.redis.prefix).dead_letters()
                    found["dead_letters"] = await client.xlen(dead)
                    return found

                yield rt, redis_gauges
        finally:
            await client.aclose()


async def run(args: argparse.Namespace) -> list[Row]:
    """Drive the load (see the module docstring) and summarise it."""
    texts = message_texts(2_000)
    seconds: list[_Second] = []
    all_latencies: list[float] = []
    errors: dict[str, int] = {}
    console = Console(stderr=True, width=None if sys.stderr.isatty() else 120)
    async with _target(args) as (rt, gauges):
        addresses = [f"memory/load{i}" for i in range(args.agents)]
        inflight = 0
        cap = args.max_inflight or float("inf")

        async def one(i: int, bucket: _Second) -> None:
            nonlocal inflight
            try:
                await ask(i, bucket)
            finally:
                inflight -= 1

        async def ask(i: int, bucket: _Second) -> None:
            address = addresses[i % len(addresses)]
            if (i % 100) < args.mix * 100:
                command: Any = Context(max_tokens=2_000)
            else:
                command = Add(messages=[Message(role="user", content=texts[i % len(texts)])])
            t0 = time.perf_counter()
            try:
                await rt.ask(address, command, timeout=args.timeout)
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
                            seconds[-1].gauges = await gauges()
                            if not args.quiet:
                                live.update(_table(seconds))
                        seconds.append(_Second(t, rate))
                    bucket = seconds[-1]
                    while next_at <= now:
                        if inflight < cap:
                            inflight += 1
                            tg.start_soon(one, i, bucket)
                            bucket.sent += 1
                        else:
                            bucket.skipped += 1
                        i += 1
                        next_at += 1.0 / rate
                    await anyio.sleep(max(0.0, next_at - time.perf_counter()))
                seconds[-1].gauges = await gauges()
            elapsed = time.perf_counter() - started
            final = await gauges()
            if not args.quiet:
                live.update(_table(seconds))
        sent = sum(s.sent for s in seconds)
        skipped = sum(s.skipped for s in seconds)
        done = sum(s.done for s in seconds)
    where = "in-process" if args.transport == "memory" else f"Redis, {args.workers} worker(s)"
    rows = [
        Row(name=f"commands sent ({where})", value=sent, unit="", extra={"errors": errors}),
        Row(name="throughput (completed)", value=done / elapsed, unit="cmd/s"),
    ]
    counts: list[tuple[str, float]] = [
        ("errors", sum(errors.values())),
        ("not sent: --max-inflight asks already waiting", skipped),
    ]
    if args.transport == "memory":
        counts.append(("redeliveries (in-process: none by design)", 0))
    elif "redelivered" in final:
        counts.append(("redeliveries (the worker's RedisTransport.stats())", final["redelivered"]))
    else:
        most = max((s.gauges.get("redelivered_pending", 0) for s in seconds), default=0)
        counts.append(("redelivered entries pending, most seen (XPENDING)", most))
    if "expired" in final:
        counts.append(
            ("asks dropped unhandled, their asker gone (RuntimeStats.expired)", final["expired"])
        )
    if "dead_letters" in final:
        counts.append(("dead letters", final["dead_letters"]))
    rows += [Row(name=name, value=value, unit="") for name, value in counts]
    for p in (50, 95, 99):
        rows.append(Row(name=f"latency p{p}", value=percentile(all_latencies, p) * 1e3, unit="ms"))
    series = [s.row() for s in seconds]
    for gauge in ("max_mailbox_depth", "stream_waiting", "stream_pending"):
        if gauge in final:
            rows.append(
                Row(
                    name=f"{gauge.replace('_', ' ')}, most seen",
                    value=max((s.gauges.get(gauge, 0) for s in seconds), default=0),
                    unit="msgs",
                )
            )
    rows[-1].extra["series"] = series
    return rows


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
