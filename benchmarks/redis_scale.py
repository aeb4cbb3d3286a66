"""Registered agents by the million over Redis: memory per passivated agent, activation, churn.

Each agent count runs in a fresh process with its own ``redis-server``; that
process is the worker (it owns every shard) and the driver that tells the agents.

**Registration.** Every agent is told one short message, then left idle until the
worker passivates it (``[redis] passivate_after`` is short here): its state is in
Redis, not in the worker's memory. The agents are told in waves, so that at most
``--active`` of them are in the worker's memory at once, as in a deployment whose
agents are mostly idle. The rate (agents registered and passivated per second) is
a row.

**Redis memory per passivated agent.** The agents' own keys (``MEMORY USAGE``,
which counts the key's name and its entry in the keyspace), and ``used_memory``
grown over the registration with the shard streams' growth taken out: the streams
keep handled entries up to ``stream_maxlen`` per shard, a bound that does not grow
with the agents (their figure is a row of its own).

**Worker.** Its RSS after the registration, per agent, and the gc-tracked objects
left per agent (whether anything of a passivated agent is still referenced).

**Activation.** An ask (``context()``) to a passivated agent picked at random: the
worker loads its state from Redis before handling it; next to an ask to the same
agent right after, while it is active.

**Active at once.** A worker that passivates nothing meanwhile is told one message
for each of ``--active`` passivated agents, as fast as the driver sends: the rate
at which they come back into memory, the worker's RSS per active agent, and asks
to some of them while all are in memory.

**Churn.** ``--rounds`` more rounds, each telling ``--churn`` new agents and
``--churn`` registered ones (activated from Redis, passivated again), in waves
as above; the worker's RSS after each round. A worker whose RSS stays flat over
the rounds keeps nothing per agent it passivated, and what the first round left
is memory the allocator keeps and reuses.

The measuring process writes one JSON object a line on its stdout: a progress line
per step, a row per measure as soon as it is measured (so a stopped run keeps the
rows it finished).
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import time
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any, cast

import anyio
import msgspec

from actormem.actors import Message
from actormem.actors.memory.commands import Add, Context
from actormem.benchmarks._common import (
    Row,
    at_least,
    percentile,
    plan,
    recorded_rows,
    rss_bytes,
    step,
)
from actormem.benchmarks._redis import (
    agent_keys_memory,
    redis_app_config,
    redis_info_memory,
    server,
    streams_memory,
    worker_runtime,
)
from actormem.runtime.redis.transport import RedisTransport

__all__ = (
    "NAME",
    "add_arguments",
    "run",
)

NAME = "redis_scale"

#: Seconds an idle agent stays in the worker's memory in this benchmark.
_PASSIVATE_AFTER = 1.0
#: Seconds an idle agent stays in memory while measuring ``--active`` agents at once.
_KEEP_ACTIVE = 3_600.0
#: Progress lines during a registration (one per tenth of it).
_PROGRESS_STEPS = 10
#: Steps per agent count besides the registration's and the churn rounds'.
_OTHER_STEPS = 3
#: The longest the measuring process may run for an agent count (s).
_CHILD_TIMEOUT = 7_200.0
#: Seed of the agents picked at random (activations, churn).
_SEED = 22


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--agents", type=at_least(1), nargs="+", default=[1_000, 10_000], help="agent counts"
    )
    parser.add_argument(
        "--activations", type=at_least(1), default=200, help="passivated agents asked"
    )
    parser.add_argument(
        "--active",
        type=at_least(2),
        default=10_000,
        help="agents in the worker's memory at once, at most while registering (and "
        "the number activated at once); capped at the agent count",
    )
    parser.add_argument(
        "--rounds", type=at_least(0), default=3, help="churn rounds after the registration"
    )
    parser.add_argument(
        "--churn",
        type=at_least(1),
        default=None,
        help="new agents per churn round, and as many registered ones told again "
        "(default: the agent count, at most 100,000)",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)


def _emit(**line: Any) -> None:
    """One JSON line to the parent process."""
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def _row(row: Row) -> None:
    _emit(row=msgspec.to_builtins(row))


async def _settled(rt: Any, processed: int, at_most: int) -> None:
    """Wait until ``rt`` has handled ``processed`` messages in all and holds at most
    ``at_most`` active agents."""
    with anyio.fail_after(900):
        while rt.processed < processed:  # noqa: ASYNC110 (no event to wait on)
            await anyio.sleep(0.01)
        while rt.stats().active > at_most:  # noqa: ASYNC110
            await anyio.sleep(0.05)


async def _tell_in_waves(
    rt: Any, names: Iterable[str], total: int, active: int, label: str = ""
) -> None:
    """Tell each of ``names`` (``total`` of them) one message, in waves of half of
    ``active``, each sent once at most half of ``active`` agents are in memory; return
    once all are handled and passivated. With ``label``, a progress line per tenth."""
    wave = max(active // 2, 1)
    body = Add(messages=[Message(role="user", content="hello")])
    sent = 0
    shown = 0
    base = rt.processed
    for name in names:
        await rt.tell(name, body)
        sent += 1
        if sent % wave == 0:
            await _settled(rt, base + sent, active - wave)
        if label and sent * _PROGRESS_STEPS >= (shown + 1) * total:
            shown += 1
            _emit(progress=f"{label}: {sent:,} of {total:,} agents told")
    await _settled(rt, base + sent, 0)


def _registered(n: int) -> Iterable[str]:
    return (f"memory/a{i}" for i in range(n))


async def _registration(
    rt: Any, redis_url: str, n: int, active: int, prefix: str, shards: int
) -> None:
    gc.collect()
    rss0, used0 = rss_bytes(), await redis_info_memory(redis_url)
    streams0 = await streams_memory(redis_url, prefix, shards)
    objects0 = len(gc.get_objects())
    started = time.perf_counter()
    await _tell_in_waves(rt, _registered(n), n, active, f"{n:,} agents")
    elapsed = time.perf_counter() - started
    gc.collect()
    rss1, used1 = rss_bytes(), await redis_info_memory(redis_url)
    streams1 = await streams_memory(redis_url, prefix, shards)
    objects1 = len(gc.get_objects())
    tracked = cast(RedisTransport, rt.transport).stats().actors
    _row(
        Row(
            name=f"agents registered, told once and passivated, {n:,} agents",
            value=n / elapsed,
            unit="agents/s",
            extra={"agents": n, "seconds": elapsed, "active_at_most": active},
        )
    )
    _emit(progress=f"{n:,} agents: measuring their keys in Redis")
    # Every agent's keys (the warm-up agent's too).
    keys_bytes, keys, by_kind = await agent_keys_memory(redis_url, prefix)
    rows = (
        Row(
            name=f"passivated agent in Redis (used_memory, streams out), {n:,} agents",
            value=(used1 - used0 - (streams1 - streams0)) / n,
            unit="B",
            target="<= 600 B",
            extra={
                "agents": n,
                "used_memory_per_agent": (used1 - used0) / n,
                "streams_bytes": streams1,
            },
        ),
        Row(
            name=f"passivated agent's keys in Redis (MEMORY USAGE), {n:,} agents",
            value=keys_bytes / (n + 1),
            unit="B",
            target="<= 600 B",
            extra={
                "agents": n,
                "keys_per_agent": keys / (n + 1),
                "bytes_by_key": {kind: size / (n + 1) for kind, size in by_kind.items()},
            },
        ),
        Row(
            name=f"shard streams in Redis (handled entries kept), {n:,} agents",
            value=streams1 / 2**20,
            unit="MB",
            extra={"agents": n},
        ),
        Row(
            name=f"passivated agent, worker RSS left, {n:,} agents",
            value=(rss1 - rss0) / n,
            unit="B",
            target="< 1 KB",
            extra={"agents": n, "still_tracked": tracked, "rss_mb": rss1 / 2**20},
        ),
        Row(
            name=f"passivated agent, gc-tracked Python objects left, {n:,} agents",
            value=(objects1 - objects0) / n,
            unit="objects",
            extra={"agents": n},
        ),
    )
    for row in rows:
        _row(row)


async def _activations(rt: Any, n: int, activations: int, rng: random.Random) -> None:
    cold: list[float] = []
    warm: list[float] = []
    for i in rng.sample(range(n), min(activations, n)):
        address = f"memory/a{i}"
        t0 = time.perf_counter()
        await rt.ask(address, Context(max_tokens=1_000))
        cold.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        await rt.ask(address, Context(max_tokens=1_000))
        warm.append(time.perf_counter() - t0)
    for p in (50, 99):
        cold_p, warm_p = percentile(cold, p), percentile(warm, p)
        _row(
            Row(
                name=f"activation of a passivated agent (ask context()), p{p}, {n:,} agents",
                value=cold_p * 1e6,
                unit="us",
                baseline="ask to an active agent",
                baseline_value=warm_p * 1e6,
                ratio=cold_p / warm_p,
                target="< 5,000 us" if p == 99 else None,
                extra={"agents": n, "asks": len(cold)},
            )
        )


async def _active_at_once(rt: Any, n: int, active: int, rng: random.Random) -> None:
    """Tell ``active`` passivated agents one message each (this worker passivates
    none of them meanwhile), then ask some of them while all are in memory."""
    picked = [f"memory/a{i}" for i in rng.sample(range(n), active)]
    gc.collect()
    rss0 = rss_bytes()
    body = Add(messages=[Message(role="user", content="hello again")])
    base = rt.processed
    started = time.perf_counter()
    for name in picked:
        await rt.tell(name, body)
    with anyio.fail_after(900):
        while rt.processed < base + active:  # noqa: ASYNC110
            await anyio.sleep(0.005)
    elapsed = time.perf_counter() - started
    gc.collect()
    rss1 = rss_bytes()
    most = rt.stats().active
    asked: list[float] = []
    for name in rng.sample(picked, min(200, active)):
        t0 = time.perf_counter()
        await rt.ask(name, Context(max_tokens=1_000))
        asked.append(time.perf_counter() - t0)
    extra = {"agents": n, "active": active, "most_active": most}
    _row(
        Row(
            name=f"{active:,} passivated agents activated at once, {n:,} agents",
            value=active / elapsed,
            unit="agents/s",
            extra={**extra, "seconds": elapsed},
        )
    )
    _row(
        Row(
            name=f"worker RSS per active agent, {active:,} active of {n:,} agents",
            value=(rss1 - rss0) / active,
            unit="B",
            extra=extra,
        )
    )
    for p in (50, 99):
        _row(
            Row(
                name=f"ask context() with {active:,} agents active, p{p}, {n:,} agents",
                value=percentile(asked, p) * 1e6,
                unit="us",
                extra={**extra, "asks": len(asked)},
            )
        )


async def _churn(rt: Any, n: int, rounds: int, churn: int, active: int, rng: random.Random) -> None:
    sizes: list[float] = []
    for r in range(rounds):
        told_again = rng.sample(range(n), min(churn, n))

        def names(r: int = r, again: list[int] = told_again) -> Iterable[str]:
            for i in range(churn):
                yield f"memory/r{r}-{i}"
                if i < len(again):
                    yield f"memory/a{again[i]}"

        total = churn + len(told_again)
        await _tell_in_waves(rt, names(), total, active, f"churn round {r + 1} of {rounds}")
        del told_again
        gc.collect()
        sizes.append(rss_bytes())
        _row(
            Row(
                name=f"worker RSS after churn round {r + 1} of {rounds}, {n:,} agents",
                value=sizes[-1] / 2**20,
                unit="MB",
                extra={"agents": n, "round": r + 1, "churn": churn},
            )
        )
    if rounds:
        _row(
            Row(
                name=f"worker RSS over {rounds} churn rounds, most / least, {n:,} agents",
                value=max(sizes) / min(sizes),
                unit="x",
                target="<= 1.10",
                extra={
                    "agents": n,
                    "churn": churn,
                    "growth_per_agent_b": (sizes[-1] - sizes[0]) / (2 * churn * max(rounds - 1, 1)),
                },
            )
        )


async def _child(args: argparse.Namespace) -> None:
    n = args.n
    active = min(args.active, n)
    churn = args.churn if args.churn is not None else min(n, 100_000)
    rng = random.Random(_SEED)
    async with server() as redis:
        config = redis_app_config(redis.url, passivate_after=_PASSIVATE_AFTER)
        async with worker_runtime(config) as rt:
            await rt.ask("memory/warm", Add(messages=[Message(role="user", content="warm up")]))
            await _settled(rt, rt.processed, 0)
            await _registration(rt, redis.url, n, active, config.redis.prefix, config.redis.shards)
            _emit(progress=f"{n:,} agents: activations")
            await _activations(rt, n, args.activations, rng)
        # A worker of its own that keeps them all in memory: the same agents, the
        # same Redis, passivation out of the way.
        _emit(progress=f"{n:,} agents: {active:,} active at once")
        keeping = msgspec.structs.replace(
            config, redis=config.redis.replace(passivate_after=_KEEP_ACTIVE)
        )
        async with worker_runtime(keeping) as rt:
            await _active_at_once(rt, n, active, rng)
        async with worker_runtime(config) as rt:
            await _churn(rt, n, args.rounds, churn, active, rng)


@asynccontextmanager
async def _measuring(argv: list[str]) -> AsyncIterator[anyio.abc.Process]:
    """The measuring process; killed if the run stops."""
    command = [sys.executable, "-m", "actormem.benchmarks", *argv]
    async with await anyio.open_process(command, stdin=None, stderr=None) as proc:
        try:
            yield proc
        finally:
            if proc.returncode is None:
                proc.kill()


async def _measure(n: int, args: argparse.Namespace, rows: list[Row]) -> None:
    argv = ["redis_scale", "--child", "--n", str(n), "--activations", str(args.activations)]
    argv += ["--active", str(args.active), "--rounds", str(args.rounds)]
    if args.churn is not None:
        argv += ["--churn", str(args.churn)]
    with anyio.fail_after(_CHILD_TIMEOUT):
        async with _measuring(argv) as proc:
            assert proc.stdout is not None
            buffered = b""
            async for chunk in proc.stdout:
                buffered += chunk
                *lines, buffered = buffered.split(b"\n")
                for line in lines:
                    item = json.loads(line)
                    if "progress" in item:
                        step(item["progress"])
                    else:
                        rows.append(msgspec.convert(item["row"], Row))
            code = await proc.wait()
    if code != 0:
        raise RuntimeError(f"redis_scale at {n:,} agents: the measuring process exited with {code}")


async def run(args: argparse.Namespace) -> list[Row]:
    """One fresh process per agent count; see the module docstring."""
    if args.child:
        await _child(args)
        raise SystemExit(0)
    rows = recorded_rows()
    plan(len(args.agents) * (1 + _PROGRESS_STEPS + _OTHER_STEPS + args.rounds * _PROGRESS_STEPS))
    for n in args.agents:
        step(f"{n:,} agents (a process and a Redis of its own)")
        await _measure(n, args, rows)
    return rows
