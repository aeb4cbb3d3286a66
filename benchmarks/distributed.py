"""Add commands per second with 1, 2 and 3 worker processes on one Redis, next to raw redis-py.

A client runtime in this process tells ``add`` commands to many agents, counting
each message's tokens as a handle does (inside the clock: the client's work); the
clock stops when every shard stream is read and acked by the workers (XINFO
GROUPS: no lag, nothing pending). Each worker count runs on fresh keys of the
same private ``redis-server``, next to the raw redis-py baseline on that server.
On a 2-core machine the workers, the client and Redis share two cores, so more
workers cannot scale linearly here: the figure to read is the trend.
"""

from __future__ import annotations

import argparse
import time

from actormem.actors import Message
from actormem.actors.memory.exchange import counted_add, sender_config
from actormem.benchmarks._common import (
    Row,
    above,
    at_least,
    compared,
    message_texts,
    plan,
    recorded_rows,
    step,
)
from actormem.benchmarks._redis import (
    client_runtime,
    raw_redis,
    redis_app_config,
    server,
    wait_drained,
    wire_payload,
    worker_count,
    workers,
)
from actormem.runtime.redis import connect

__all__ = (
    "NAME",
    "add_arguments",
    "drive",
    "run",
)

NAME = "distributed"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", type=at_least(1), default=10_000, help="messages per run")
    parser.add_argument(
        "--agents", type=at_least(1), default=1_000, help="agents the adds spread over"
    )
    parser.add_argument(
        "--workers",
        type=worker_count(1),
        nargs="+",
        default=[1, 2, 3],
        help="worker process counts",
    )
    parser.add_argument(
        "--timeout", type=above(0), default=300.0, help="seconds per worker count at most"
    )


async def drive(url: str, texts: list[str], agents: int, count: int, timeout: float) -> float:
    """Messages/s of adds from a client to ``count`` workers, until all are acked."""
    config = redis_app_config(url)
    messages = [Message(role="user", content=t) for t in texts]
    addresses = [f"memory/agent{i}" for i in range(agents)]
    client = connect(config.redis)
    try:
        async with workers(config, count), client_runtime(config) as (rt, transport):
            memory = sender_config(rt)
            started = time.perf_counter()
            for i, message in enumerate(messages):
                await rt.tell(addresses[i % agents], counted_add("add", message, memory))
            await transport.flush()
            await wait_drained(client, config, timeout)
            return len(messages) / (time.perf_counter() - started)
    finally:
        await client.aclose()


async def run(args: argparse.Namespace) -> list[Row]:
    """The raw baseline, then each worker count, on one server."""
    texts = message_texts(args.messages)
    rows = recorded_rows()
    plan(1 + len(args.workers))
    async with server() as redis:
        step("raw redis-py")
        raw = await raw_redis(redis.url, [wire_payload(t) for t in texts])
        rows.append(Row(name="raw redis-py XADD -> XREADGROUP -> XACK", value=raw, unit="msg/s"))
        one: float | None = None
        for count in args.workers:
            step(f"actormem add, {count} worker process(es)")
            ours = await drive(redis.url, texts, args.agents, count, args.timeout)
            one = one or ours
            rows.append(
                compared(
                    f"actormem add, {count} worker process(es), {args.agents:,} agents",
                    ours,
                    "msg/s",
                    "raw redis-py",
                    raw,
                    extra={"workers": count, "vs_one_worker": ours / one},
                )
            )
    return rows
