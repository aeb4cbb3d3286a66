"""Add commands per second through one worker over Redis, next to raw redis-py on that server.

The worker is a :class:`MemoryRuntime` whose :class:`RedisTransport` owns every
shard of a private ``redis-server``; the producer tells ``add`` commands from the
same process, and the clock stops when the worker has handled (stored, acked)
the last one. The baseline, measured in the same run on entries of the same size:
one producer XADDs in pipelines of 1,000, one consumer XREADGROUP COUNT 1000 ->
XACK, concurrently, until the last entry is acked.

Both are noisy on a shared machine (the baseline alone varies by a third from run
to run), so each agent count runs ``--repeat`` pairs, baseline then actormem, and
reports the medians and the median of the pairs' ratios. Each actormem run records
the process's CPU time per add too (``cpu_us_per_add`` in the row's extra and
runs), which moves much less than the rate with the load of a shared machine.

Each message's tokens are counted where it is made, as a client's handle does
(:func:`actormem.benchmarks._redis.sender_adds`), before the clock starts: the
producer stands for the deployment's clients, and the figure is what the one
worker handles.

Between the two runs the least work that has an ``add``'s effect, with no runtime
(:func:`actormem.benchmarks._redis.floor_redis`): every entry decoded, its message
(counted by the sender) encoded for its agent's history, each batch stored and
acked with one script call. Its ratio to the raw baseline is the most any
implementation of these semantics on redis-py and msgspec could reach here;
actormem's distance from it is what the runtime itself costs.
"""

from __future__ import annotations

import argparse
import statistics
import time

import anyio

from actormem.actors.memory.commands import Add
from actormem.benchmarks._common import (
    Row,
    above,
    at_least,
    message_texts,
    plan,
    recorded_rows,
    step,
    timed_adds,
    wait_processed,
)
from actormem.benchmarks._redis import (
    floor_redis,
    raw_redis,
    redis_app_config,
    sender_adds,
    server,
    wire_payload,
    worker_runtime,
)

__all__ = (
    "NAME",
    "actormem_add",
    "add_arguments",
    "run",
)

NAME = "redis_throughput"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--messages", type=at_least(1), default=3_000, help="messages per agent count"
    )
    parser.add_argument(
        "--agents", type=at_least(1), nargs="+", default=[1, 100, 10_000], help="agent counts"
    )
    parser.add_argument(
        "--cold", action="store_true", help="do not activate the agents before timing"
    )
    parser.add_argument(
        "--timeout",
        type=above(0),
        default=300.0,
        help="give up on one agent count after this many seconds",
    )
    parser.add_argument(
        "--repeat",
        type=at_least(1),
        default=3,
        help="pairs of runs (baseline, actormem) per agent count; medians are reported",
    )


async def actormem_add(
    url: str, adds: list[Add], agents: int, timeout: float, cold: bool = False
) -> tuple[float, float]:
    """Messages/s of ``adds`` (one message each) told to ``agents`` agents, until all
    are handled (``cold``: the agents are not activated first, so first messages
    load state), and the process's CPU time per add meanwhile (µs: the worker's and
    the producer's, which share the process): on a shared machine the rate moves
    with the cores the process gets, its CPU per add much less."""
    messages = [add.messages[0] for add in adds]
    config = redis_app_config(url)
    async with worker_runtime(config) as rt:
        addresses = [f"memory/agent{i}" for i in range(agents)]
        with anyio.fail_after(timeout):
            if not cold:
                # Activate every agent first (untimed), as the in-process benchmark
                # does: this measures steady-state adds, not activations.
                for address in addresses:
                    await rt.tell(address, Add(messages=[]))
                await wait_processed(rt, agents, poll=0.005)
            started = time.process_time()
            rate = await timed_adds(rt, addresses, messages, 0.002, adds[0].encoding)
            return rate, (time.process_time() - started) / len(adds) * 1e6


async def run(args: argparse.Namespace) -> list[Row]:
    """Measure the raw baseline and actormem in alternating pairs at each agent count,
    on one server."""
    texts = message_texts(args.messages)
    adds = sender_adds(texts)
    payloads = [wire_payload(t) for t in texts]
    raws: list[float] = []
    rows = recorded_rows()
    plan(3 * args.repeat * len(args.agents))
    async with server() as redis:
        for agents in args.agents:
            pairs = []
            floors = []
            cpus: list[float] = []
            for n in range(args.repeat):
                run = f"{agents:,} agents, run {n + 1} of {args.repeat}"
                step(f"{run}: raw redis-py")
                raw = await raw_redis(redis.url, payloads)
                step(f"{run}: least work, no runtime")
                floors.append(await floor_redis(redis.url, adds, agents))
                step(f"{run}: actormem add")
                ours, cpu = await actormem_add(redis.url, adds, agents, args.timeout, args.cold)
                pairs.append((raw, ours))
                cpus.append(cpu)
            raws += [raw for raw, _ in pairs]
            raw = statistics.median(raw for raw, _ in pairs)
            rows.append(
                Row(
                    name=f"least work for the same adds (counted by the sender), no runtime, "
                    f"{agents:,} agents",
                    value=statistics.median(floors),
                    unit="msg/s",
                    baseline="raw redis-py",
                    baseline_value=raw,
                    ratio=statistics.median(f / r for f, (r, _) in zip(floors, pairs, strict=True)),
                    extra={"agents": agents, "runs": floors},
                )
            )
            rows.append(
                Row(
                    name=f"actormem add over Redis, 1 worker, {agents:,} agents"
                    + (" (cold)" if args.cold else ""),
                    value=statistics.median(ours for _, ours in pairs),
                    unit="msg/s",
                    baseline="raw redis-py",
                    baseline_value=raw,
                    ratio=statistics.median(ours / raw for raw, ours in pairs),
                    target=">= 0.6x raw",
                    extra={
                        "agents": agents,
                        "messages": len(adds),
                        "cold": args.cold,
                        "cpu_us_per_add": statistics.median(cpus),
                        "runs": [
                            {"raw": raw, "actormem": ours, "cpu_us_per_add": cpu}
                            for (raw, ours), cpu in zip(pairs, cpus, strict=True)
                        ],
                    },
                )
            )
    baseline = Row(
        name="raw redis-py XADD -> XREADGROUP COUNT 1000 -> XACK",
        value=statistics.median(raws),
        unit="msg/s",
        extra={"runs": raws},
    )
    rows.insert(0, baseline)
    return rows
