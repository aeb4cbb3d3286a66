"""Ask round trips from a client process to a worker over Redis: p50/p95/p99 under open-loop load.

The asks (``context()`` and ``add``) go from a client runtime in this process to
one worker process over Redis streams, at 50% and 90% of the measured peak and at
the target's fixed 5,000 asks/s, open loop (see :mod:`actormem.benchmarks.latency`).
Each ``add`` carries its message's token count, made by the asker as a memory
handle makes it, so the worker does not tokenize.

A rate above the measured peak queues without bound, so its percentiles mostly
measure the queue: the fixed-rate rows say how far off the target is, honestly.

The raw baseline runs at each of the same rates just before: the same asker process
asks a plain redis-py responder process over two streams, with requests the size
of an ``add``'s (see :mod:`actormem.benchmarks._raw_echo`).

Each level also reports the CPU the three processes of a round trip used per
answered ask (this client, the worker, ``redis-server``; read from /proc, so
Linux only), beside the raw asker's, responder's and ``redis-server``'s at the
same rate: whether a tail comes from more work per ask or from how the work
waits for a core.

With ``--trace`` the client and the worker record when each ask passed each stage
of its way (see :mod:`actormem.runtime.redis._trace`), and the run adds, per level,
the p50 and p99 of the time between stages: the client's outbox, on to the
worker's read, the mailbox, the handler, the wait for the commit call and the call
itself, the worker's reply outbox, and the reply back to the asker. Tracing costs
some of the worker's time: read a traced run's stages, not its totals.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from actormem.benchmarks._common import (
    Row,
    above,
    at_least,
    message_texts,
    percentile,
    process_cpu,
)
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
from actormem.runtime.redis._trace import (
    TRACE_ENV,
    Records,
    Stage,
    Tracer,
    call_sizes,
    load,
    loop_lags,
    spans,
    timelines,
)

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
    parser.add_argument(
        "--trace",
        action="store_true",
        help="also report each level's time between the stages of an ask (p50, p99)",
    )


async def run(args: argparse.Namespace) -> list[Row]:
    """One worker process, a client runtime here (see :func:`actormem.benchmarks.latency.measure`),
    next to the raw redis-py round trip on the same server."""
    payload = wire_payload(message_texts(1)[0])
    levels: list[tuple[str, float, float]] = []
    tracer = Tracer() if args.trace else None
    with _trace_dir(args.trace) as traces:
        env = {TRACE_ENV: str(traces)} if traces is not None else None
        async with server() as redis:
            config = redis_app_config(redis.url)
            client = connect(config.redis)
            try:
                async with (
                    workers(config, 1, env) as procs,
                    client_runtime(config, tracer) as (rt, _transport),
                    raw_responder(redis.url) as raw,
                ):
                    worker_pid, responder_pid, server_pid = procs.pid(0), raw.pid, redis.pid

                    def ours() -> dict[str, float]:
                        return {
                            "client": process_cpu(),
                            "worker": process_cpu(worker_pid),
                            "redis-server": process_cpu(server_pid),
                        }

                    def theirs() -> dict[str, float]:
                        return {
                            "asker": process_cpu(),
                            "responder": process_cpu(responder_pid),
                            "redis-server": process_cpu(server_pid),
                        }

                    async def raw_ask(_: int) -> object:
                        return await raw.ask(payload)

                    settle = partial(wait_drained, client, config, _SETTLE_TIMEOUT)
                    baseline = Baseline("raw redis-py round trip", raw_ask, theirs)
                    on_level = None if tracer is None else _on_level(levels)
                    rows = await measure(
                        rt, "Redis", args, baseline, args.fixed_rate, settle, on_level, ours
                    )
            finally:
                await client.aclose()
        if tracer is not None and traces is not None:
            # The workers wrote theirs as they exited.
            worker_records = [load(path) for path in sorted(traces.glob("*.msgpack"))]
            rows += stage_rows(tracer.records(), worker_records, levels)
    return rows


@contextmanager
def _trace_dir(wanted: bool) -> Iterator[Path | None]:
    """A temporary directory the worker processes write their traces to, if ``wanted``."""
    if not wanted:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="actormem-trace-") as directory:
        yield Path(directory)


def _on_level(levels: list[tuple[str, float, float]]) -> Callable[[str, float, float], None]:
    """What keeps each level's name and time in ``levels`` (``measure``'s ``on_level``)."""

    def record(name: str, began: float, ended: float) -> None:
        levels.append((name, began, ended))

    return record


def stage_rows(
    client: Records, workers: list[Records], levels: list[tuple[str, float, float]]
) -> list[Row]:
    """Per level (its name, and when it began and ended): the p50 and p99 of each span
    between an ask's stages, over the asks sent during it; of how late the client's
    and the worker's event loops ran; and the commands per shard read and per commit
    call, on average."""
    lines = timelines([client, *workers])
    rows: list[Row] = []
    for name, began, ended in levels:
        during = [line for line in lines.values() if began <= line[Stage.SENT] <= ended]
        figures = spans(during)
        for who, records in (("client", [client]), ("worker", workers)):
            figures[f"{who} event loop late"] = loop_lags(records, began, ended)
        for span, samples in figures.items():
            for p in (50, 99) if samples else ():
                rows.append(
                    Row(
                        name=f"Redis {name}: {span} p{p}",
                        value=percentile(samples, p) * 1e3,
                        unit="ms",
                        extra={"level": name, "span": span, "quantile": p / 100},
                    )
                )
        for stage, what in ((Stage.READ, "shard read"), (Stage.COMMITTING, "commit call")):
            sizes = call_sizes(workers, stage, began, ended)
            if sizes:
                rows.append(
                    Row(
                        name=f"Redis {name}: commands per {what} (mean)",
                        value=sum(sizes) / len(sizes),
                        unit="commands",
                        extra={"level": name, "calls": len(sizes)},
                    )
                )
    return rows
