"""Ask round trips from a client process to a worker over Redis: p50/p95/p99 under open-loop load.

The asks (``context()`` and ``add``) go from a client runtime in this process to
one worker process over Redis streams, at 50% and 90% of the measured peak and at
the target's fixed 5,000 asks/s, open loop (see :mod:`actormem.benchmarks.latency`).

A rate above the measured peak queues without bound, so its percentiles mostly
measure the queue: the fixed-rate rows say how far off the target is, honestly.

The raw baseline runs at each of the same rates just before: the same asker process
asks a plain redis-py responder process over two streams, with requests the size
of an ``add``'s (see :mod:`actormem.benchmarks._raw_echo`).
"""

from __future__ import annotations

import argparse
from functools import partial

from actormem.benchmarks._common import Row, above, at_least, message_texts
from actormem.benchmarks._raw_echo import raw_responder
from actormem.benchmarks._redis import (
    client_runtime,
    redis_app_config,
    server,
    wait_drained,
    wire_payload,
    workers,
)
from actormem.benchmarks.latency import Baseline, measure
from actormem.runtime.redis import connect

NAME = "redis_latency"

#: Seconds the worker may take to work off what an overloaded level left queued.
_SETTLE_TIMEOUT = 600.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--agents", type=at_least(1), default=100, help="agents asked in turn")
    parser.add_argument("--seconds", type=above(0), default=3.0, help="seconds per load level")
    parser.add_argument(
        "--concurrency", type=at_least(1), default=64, help="askers when finding peak"
    )
    parser.add_argument(
        "--fixed-rate",
        type=at_least(0.0, float),
        default=5_000.0,
        help="the target's rate (asks/s); 0 = skip",
    )


async def run(args: argparse.Namespace) -> list[Row]:
    """One worker process, a client runtime here (see :func:`actormem.benchmarks.latency.measure`),
    next to the raw redis-py round trip on the same server."""
    payload = wire_payload(message_texts(1)[0])
    async with server() as redis:
        config = redis_app_config(redis.url)
        client = connect(config.redis)
        try:
            async with (
                workers(config, 1),
                client_runtime(config) as (rt, _transport),
                raw_responder(redis.url) as raw,
            ):

                async def raw_ask(_: int) -> object:
                    return await raw.ask(payload)

                settle = partial(wait_drained, client, config, _SETTLE_TIMEOUT)
                baseline = Baseline("raw redis-py round trip", raw_ask)
                return await measure(rt, "Redis", args, baseline, args.fixed_rate, settle)
        finally:
            await client.aclose()
