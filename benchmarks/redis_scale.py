"""Memory per passivated agent (Redis and worker) and the time to activate one again.

Memory per passivated agent (Redis ``used_memory`` and the worker's resident
memory) at 1,000 / 10,000 agents, and the activation time of a passivated
agent, next to an ask to an agent still in memory. Each size runs in a fresh process
with its own ``redis-server``.

``used_memory`` also counts the shard streams' entries still in Redis (trimmed
only past ``stream_maxlen``), so the agents' own keys are measured too, with
``MEMORY USAGE``. The worker's RSS after passivation includes what the allocator keeps rather
than returning to the OS; the count of gc-tracked objects left per agent says
whether anything of the agents is still referenced.

Every agent is told one short message, then left idle until the worker passivates
it (``[redis] passivate_after`` is short here): its state is in Redis, not in the
worker's memory. Activation is an ask (``context()``) to such an agent: the worker
loads its state from Redis before handling it.

Churn: then ``--rounds`` more rounds, each of as many new agents, told and
passivated the same way. The worker's RSS growth over them, per agent, says
whether passivated agents leave anything behind, or whether what the first round
left is memory the allocator keeps and reuses (a long-running worker's steady state).
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from typing import Any, cast

import anyio

from actormem.actors import Message
from actormem.actors.memory.commands import Add, Context
from actormem.benchmarks._common import (
    Row,
    at_least,
    child_json,
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
    worker_runtime,
)
from actormem.runtime.redis.transport import RedisTransport

NAME = "redis_scale"

#: Seconds an idle agent stays in the worker's memory in this benchmark.
_PASSIVATE_AFTER = 1.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--agents", type=at_least(1), nargs="+", default=[1_000, 10_000], help="agent counts"
    )
    parser.add_argument(
        "--activations", type=at_least(1), default=200, help="passivated agents asked"
    )
    parser.add_argument(
        "--rounds", type=at_least(0), default=3, help="rounds of new agents after the first"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)


async def _tell_and_passivate(rt: Any, names: list[str]) -> None:
    """Tell each of ``names`` one message; return once all are handled and passivated."""
    base = rt.processed
    for name in names:
        await rt.tell(name, Add(messages=[Message(role="user", content="hello")]))
    with anyio.fail_after(600):
        while rt.processed - base < len(names):  # noqa: ASYNC110
            await anyio.sleep(0.01)
        while rt.stats().active > 0:  # noqa: ASYNC110
            await anyio.sleep(0.05)


async def _child(n: int, activations: int, rounds: int) -> dict[str, float]:
    async with server() as redis:
        config = redis_app_config(redis.url, passivate_after=_PASSIVATE_AFTER)
        async with worker_runtime(config) as rt:
            transport = cast(RedisTransport, rt.transport)
            await rt.ask("memory/warm", Add(messages=[Message(role="user", content="warm up")]))
            gc.collect()
            rss0, used0 = rss_bytes(), await redis_info_memory(redis.url)
            objects0 = len(gc.get_objects())
            # Until the worker has passivated them all (the warm-up agent too).
            await _tell_and_passivate(rt, [f"memory/a{i}" for i in range(n)])
            gc.collect()
            rss1, used1 = rss_bytes(), await redis_info_memory(redis.url)
            objects1 = len(gc.get_objects())
            # The agents' own keys, without the shard streams' entries still in
            # Redis (trimmed only past stream_maxlen, so they weigh more at 1,000).
            keys_bytes, keys = await agent_keys_memory(redis.url, config.redis.prefix)
            cold: list[float] = []
            warm: list[float] = []
            for i in range(min(activations, n)):
                address = f"memory/a{i}"
                t0 = time.perf_counter()
                await rt.ask(address, Context(max_tokens=1_000))
                cold.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                await rt.ask(address, Context(max_tokens=1_000))
                warm.append(time.perf_counter() - t0)
            rss2 = rss_bytes()
            for r in range(rounds):
                await _tell_and_passivate(rt, [f"memory/r{r}-{i}" for i in range(n)])
            gc.collect()
            rss3 = rss_bytes()
            return {
                "churn_rss_per_agent": (rss3 - rss2) / (n * rounds) if rounds else 0.0,
                "redis_per_agent": (used1 - used0) / n,
                "keys_per_agent": keys_bytes / (n + 1),  # and the warm-up agent
                "agent_keys": keys / (n + 1),
                "rss_per_agent": (rss1 - rss0) / n,
                "tracked_agents": float(transport.stats().actors),
                "objects_per_agent": (objects1 - objects0) / n,
                "activation_p50": percentile(cold, 50),
                "activation_p99": percentile(cold, 99),
                "active_ask_p50": percentile(warm, 50),
                "active_ask_p99": percentile(warm, 99),
            }


async def _measure(n: int, activations: int, rounds: int) -> dict[str, float]:
    argv = ["redis_scale", "--child", "--n", str(n), "--activations", str(activations)]
    return await child_json([*argv, "--rounds", str(rounds)], timeout=900)


async def run(args: argparse.Namespace) -> list[Row]:
    """One fresh process per agent count; see the module docstring."""
    if args.child:
        print(json.dumps(await _child(args.n, args.activations, args.rounds)))
        raise SystemExit(0)
    rows = recorded_rows()
    plan(len(args.agents))
    for n in args.agents:
        step(f"{n:,} agents (a process and a Redis of its own)")
        m = await _measure(n, args.activations, args.rounds)
        per_agent: tuple[tuple[str, str, str | None, dict[str, Any]], ...] = (
            ("passivated agent in Redis (used_memory)", "redis_per_agent", None, {}),
            (
                "passivated agent's keys in Redis (MEMORY USAGE)",
                "keys_per_agent",
                "< 1 KB",
                {"keys_per_agent": m["agent_keys"]},
            ),
            (
                "passivated agent, worker RSS left",
                "rss_per_agent",
                "< 1 KB",
                {"still_tracked": m["tracked_agents"]},
            ),
        )
        for name, key, target, extra in per_agent:
            rows.append(
                Row(
                    name=f"{name}, {n:,} agents",
                    value=m[key],
                    unit="B",
                    target=target,
                    extra={"agents": n, **extra},
                )
            )
        if args.rounds:
            rows.append(
                Row(
                    name=f"worker RSS growth per agent over {args.rounds} more rounds of "
                    f"{n:,} new agents (churn)",
                    value=m["churn_rss_per_agent"],
                    unit="B",
                    target="< 1 KB",
                    extra={"agents": n, "rounds": args.rounds},
                )
            )
        rows.append(
            Row(
                name=f"passivated agent, gc-tracked Python objects left, {n:,} agents",
                value=m["objects_per_agent"],
                unit="objects",
                extra={"agents": n},
            )
        )
        for p in (50, 99):
            rows.append(
                Row(
                    name=f"activation of a passivated agent (ask context()), p{p}, {n:,} agents",
                    value=m[f"activation_p{p}"] * 1e6,
                    unit="us",
                    baseline="ask to an active agent",
                    baseline_value=m[f"active_ask_p{p}"] * 1e6,
                    ratio=m[f"activation_p{p}"] / m[f"active_ask_p{p}"],
                    extra={"agents": n},
                )
            )
    return rows
