"""An open-loop load of memory commands, in process, over Redis or on a running deployment.

A steady or stepped load with a live display, reporting throughput, latency
percentiles, errors, redeliveries and mailbox depths over time.

``--transport redis`` runs against a private ``redis-server``: with ``--workers N``
(N >= 1) the load comes from a client runtime here and N worker processes host
the agents, and the depths are the shard streams' backlog (entries not yet read
by the workers, and read but not yet acked); with ``--workers 0`` this process is
the worker, and its mailboxes are reported too.

``--config FILE`` loads a running deployment instead: the app config its workers
run (``actormem worker FILE``), whose ``[redis]`` names the server, the key prefix
and the shards. Nothing is started; the load goes to agents of its own
(``memory/load-<run>-<n>``, so no existing agent is touched), waits for every
shard to have a worker first, and deletes those agents' keys when it is done.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import secrets
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import msgspec
from rich.console import Console
from rich.live import Live
from rich.table import Table

from actormem.actors import AppConfig, MemoryRuntime, Message
from actormem.actors.config import load_app_config
from actormem.actors.memory.commands import Add, Context
from actormem.benchmarks._common import (
    Row,
    above,
    at_least,
    bench_config,
    fraction,
    message_texts,
    on_stop,
    percentile,
    plan,
    step,
)
from actormem.benchmarks._redis import (
    client_runtime,
    redelivered_pending,
    redis_app_config,
    server,
    stream_backlog,
    wait_drained,
    worker_count,
    worker_runtime,
    workers,
)
from actormem.runtime import ActormemError, ConfigError
from actormem.runtime.config import redact_url
from actormem.runtime.redis import Keys, check_server, connect, redis_errors, shard_of

__all__ = (
    "NAME",
    "Gauges",
    "add_arguments",
    "run",
)

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
        "--mix", type=fraction, default=0.2, help="share of context() asks, 0..1 (the rest: adds)"
    )
    parser.add_argument(
        "--mailbox", type=at_least(1), default=1_000, help="mailbox size per agent (messages)"
    )
    parser.add_argument(
        "--timeout", type=above(0), default=30.0, help="seconds each ask waits for its reply"
    )
    parser.add_argument(
        "--max-inflight",
        type=at_least(0),
        default=5_000,
        help="asks in flight at most (asks): a command due while this many wait is not sent "
        "(counted as skipped), as a client with a bounded pool would (0: no bound)",
    )
    parser.add_argument(
        "--no-shed",
        action="store_true",
        help="handle asks whose asker gave up (runtime.shed_expired_asks = false)",
    )
    parser.add_argument(
        "--transport",
        choices=("local", "redis", "memory"),
        metavar="{local,redis}",
        default="local",
        help="where the agents run (memory: an older name of local)",
    )
    parser.add_argument(
        "--workers",
        type=worker_count(0),
        default=None,
        help="Redis worker processes to start (default 1; 0: this process is the worker)",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=None,
        help="load the running deployment whose workers run this app config (its [redis] "
        "url, prefix, shards): start nothing, use agents of its own, delete them after",
    )
    parser.add_argument(
        "--wait-workers",
        type=above(0),
        default=10.0,
        help="with --config: seconds to wait for workers to own every shard",
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


def _stream_gauges(client: Any, config: AppConfig, transport: Any) -> Gauges:
    """Depths and redeliveries of a load sent through a client runtime to workers elsewhere."""

    async def gauges() -> dict[str, int]:
        waiting, pending = await stream_backlog(client, config)
        mine = transport.stats()
        return {
            "stream_waiting": waiting,
            "stream_pending": pending,
            "redelivered_pending": await redelivered_pending(client, config),
            "client_outbox": mine.outbox,
            "client_asks": mine.pending_asks,
            "dead_letters": await client.xlen(Keys(config.redis.prefix).dead_letters()),
        }

    return gauges


async def _wait_for_workers(client: Any, config: AppConfig, seconds: float) -> None:
    """Return once every shard has a worker's lease, or raise naming those without."""
    keys = Keys(config.redis.prefix)
    shards = range(config.redis.shards)
    deadline = time.monotonic() + seconds
    while True:
        async with client.pipeline(transaction=False) as pipe:
            for shard in shards:
                pipe.exists(keys.lease(shard))
            owned = await pipe.execute()
        missing = [shard for shard, found in zip(shards, owned, strict=True) if not found]
        if not missing:
            return
        if time.monotonic() >= deadline:
            named = ", ".join(map(str, missing[:8])) + (" ..." if len(missing) > 8 else "")
            raise ConfigError(
                f"no worker owns shard(s) {named} of prefix {config.redis.prefix!r} at "
                f"{redact_url(config.redis.url or '')} after {seconds:g} s: start the "
                "deployment's workers "
                "first (actormem worker FILE)"
            )
        await anyio.sleep(0.1)


async def _delete_agents(client: Any, config: AppConfig, addresses: list[str]) -> None:
    """Delete what the deployment stored for ``addresses`` (history, snapshot, applied,
    and the replies kept for their asks)."""
    keys = Keys(config.redis.prefix)
    names: list[str] = []
    for address in addresses:
        shard = shard_of(address, config.redis.shards)
        names += (
            keys.actor_log(shard, address),
            keys.actor_snapshot(shard, address),
            keys.actor_applied(shard, address),
        )
    # A kept reply is named by its command id: found by one SCAN over the run's agents
    # (their names, ``memory/load-<run>-<n>``, hold no glob character).
    wanted = set(addresses)
    pattern = f"{keys.pattern()}:agent:{_common_start(addresses)}*:reply:*"
    async for found in client.scan_iter(match=pattern, count=1_000):
        name = found.decode()
        if name.partition(":agent:")[2].rpartition(":reply:")[0] in wanted:
            names.append(name)
    for start in range(0, len(names), 3_000):
        async with client.pipeline(transaction=False) as pipe:
            for name in names[start : start + 3_000]:  # one key per call: many slots
                pipe.delete(name)
            await pipe.execute()


def _common_start(texts: list[str]) -> str:
    """The longest start every one of ``texts`` shares (character by character)."""
    if not texts:
        return ""
    first, last = min(texts), max(texts)
    pairs = enumerate(zip(first, last, strict=False))  # first is the shorter if a prefix
    size = next((i for i, (a, b) in pairs if a != b), min(len(first), len(last)))
    return first[:size]


@asynccontextmanager
async def _deployment(
    args: argparse.Namespace, addresses: list[str]
) -> AsyncIterator[tuple[MemoryRuntime, Gauges]]:
    """A client runtime on the running deployment of ``args.config`` (see the module
    docstring); ``addresses``' keys are deleted on the way out."""
    if args.workers is not None:
        raise ConfigError(
            "--workers starts workers on a private server; --config loads the running ones"
        )
    config = load_app_config(args.config)
    if not config.redis.url:
        raise ConfigError(
            f"{args.config}: [redis] url is not set, so there is no running deployment to load "
            "(its workers would each start a server of their own)"
        )
    runtime = msgspec.structs.replace(config.runtime, transport="redis")
    config = msgspec.structs.replace(config, runtime=runtime)
    client = connect(config.redis)
    try:
        # A closed port, a refused password or a denied prefix: one line, not a traceback.
        await check_server(client, config.redis)
        with redis_errors("waiting for the deployment's workers"):
            await _wait_for_workers(client, config, args.wait_workers)
        try:
            async with client_runtime(config) as (rt, transport):
                yield rt, _stream_gauges(client, config, transport)
        finally:
            with anyio.CancelScope(shield=True):
                # What timed out may still be queued: let the workers get to it first
                # (other traffic may keep the streams busy: then delete anyway).
                with contextlib.suppress(TimeoutError):
                    await wait_drained(client, config, args.timeout)
                await _delete_agents(client, config, addresses)
    finally:
        await client.aclose()


@asynccontextmanager
async def _target(
    args: argparse.Namespace, addresses: list[str]
) -> AsyncIterator[tuple[MemoryRuntime, Gauges]]:
    """The runtime the load goes to, and how to read its depths and redeliveries."""
    if args.config:
        async with _deployment(args, addresses) as target:
            yield target
        return
    if args.transport in ("local", "memory"):
        config = bench_config(mailbox_size=args.mailbox, shed=not args.no_shed)
        async with MemoryRuntime(config) as rt:

            async def gauges() -> dict[str, int]:
                return _mailboxes(rt)

            yield rt, gauges
        return
    async with server() as redis:
        config = redis_app_config(redis.url, mailbox_size=args.mailbox, shed=not args.no_shed)
        client = connect(config.redis)
        count = 1 if args.workers is None else args.workers
        try:
            async with AsyncExitStack() as stack:
                if count:
                    await stack.enter_async_context(workers(config, count))
                    rt, transport = await stack.enter_async_context(client_runtime(config))
                    yield rt, _stream_gauges(client, config, transport)
                    return
                rt = await stack.enter_async_context(worker_runtime(config))

                async def redis_gauges() -> dict[str, int]:
                    waiting, pending = await stream_backlog(client, config)
                    found = {"stream_waiting": waiting, "stream_pending": pending}
                    found.update(_mailboxes(rt))
                    found["redelivered"] = rt.transport.stats().redelivered  # type: ignore[attr-defined]
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
    # Agents of their own on a deployment (see _deployment), and never an existing one.
    name = f"load-{secrets.token_hex(3)}-" if args.config else "load"
    addresses = [f"memory/{name}{i}" for i in range(args.agents)]
    async with _target(args, addresses) as (rt, gauges):
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

        def so_far() -> list[Row]:  # if a signal stops the run: the seconds it ran
            last = next((s.gauges for s in reversed(seconds) if s.gauges), {})
            took = time.perf_counter() - started
            return _summary(args, seconds, all_latencies, errors, took, last)

        on_stop(so_far)
        # On a terminal the live table shows the progress; elsewhere a line every 5 s
        # (the runner shows neither with --quiet).
        show_table = console.is_terminal and not args.quiet
        lines = not console.is_terminal
        plan(math.ceil(args.duration / _LINE_EVERY))
        live = Live(_table(seconds), console=console, refresh_per_second=2, transient=False)
        with live if show_table else _Null():
            async with anyio.create_task_group() as tg:
                i = 0
                next_at = started
                while (now := time.perf_counter()) - started < args.duration:
                    t = int(now - started)
                    rate = args.rate + args.step * int((now - started) / args.step_every)
                    if not seconds or seconds[-1].t != t:
                        if seconds:
                            seconds[-1].gauges = await gauges()
                            if show_table:
                                live.update(_table(seconds))
                        if lines and t % _LINE_EVERY == 0:
                            step(_line(t, args.duration, seconds))
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
            if show_table:
                live.update(_table(seconds))
    return _summary(args, seconds, all_latencies, errors, elapsed, final)


def _summary(
    args: argparse.Namespace,
    seconds: list[_Second],
    all_latencies: list[float],
    errors: dict[str, int],
    elapsed: float,
    final: dict[str, int],
) -> list[Row]:
    """The rows of a load run over ``seconds`` (``final``: the gauges at its end)."""
    sent = sum(s.sent for s in seconds)
    skipped = sum(s.skipped for s in seconds)
    done = sum(s.done for s in seconds)
    if args.config:
        where = f"the deployment of {args.config}"
    elif args.transport in ("local", "memory"):
        where = "in-process"
    else:
        where = f"Redis, {1 if args.workers is None else args.workers} worker(s)"
    rows = [
        Row(name=f"commands sent ({where})", value=sent, unit="commands", extra={"errors": errors}),
        Row(name="throughput (completed)", value=done / elapsed if elapsed else 0.0, unit="cmd/s"),
    ]
    counts: list[tuple[str, float, str]] = [
        ("errors", sum(errors.values()), "asks"),
        ("not sent: --max-inflight asks already waiting", skipped, "commands"),
    ]
    if args.transport in ("local", "memory") and not args.config:
        counts.append(("redeliveries (in-process: none by design)", 0, "commands"))
    elif "redelivered" in final:
        counts.append(
            ("redeliveries (the worker's RedisTransport.stats())", final["redelivered"], "commands")
        )
    else:
        most = max((s.gauges.get("redelivered_pending", 0) for s in seconds), default=0)
        counts.append(("redelivered entries pending, most seen (XPENDING)", most, "entries"))
    if "expired" in final:
        counts.append(
            (
                "asks dropped unhandled, their asker gone (RuntimeStats.expired)",
                final["expired"],
                "asks",
            )
        )
    if "dead_letters" in final:
        counts.append(("dead letters", final["dead_letters"], "entries"))
    rows += [Row(name=name, value=value, unit=unit) for name, value, unit in counts]
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


#: Seconds between progress lines when stderr is not a terminal.
_LINE_EVERY = 5


def _line(t: int, duration: float, seconds: list[_Second]) -> str:
    """A progress line: where the run is, and what its last second did."""
    if not seconds:
        return f"{t} s of {duration:g} s"
    last = seconds[-1].row()
    p99 = "-" if last["p99_ms"] is None else f"{last['p99_ms']:,.1f} ms"
    return (
        f"{t} s of {duration:g} s: last second {last['done']:,} done of "
        f"{last['target_rate']:,.0f}/s offered, p99 {p99}, {last['errors']:,} errors"
    )


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
