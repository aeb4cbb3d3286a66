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
of its way (see :mod:`actormem.runtime.redis.trace`), and the run adds, per level,
the p50 and p99 of the time between stages: the client's outbox, on to the
worker's read, the mailbox, the handler, the wait for the commit call and the call
itself, the worker's reply outbox, and the reply back to the asker. Tracing costs
some of the worker's time: read a traced run's stages, not its totals.

With ``--gc`` each level adds the garbage collections of each process per 10,000
asks (their pause in all, how many of each generation, the longest): this client's
and the worker's beside the raw asker's (this process too) and responder's (whose
collector runs as a worker's does). Collections are counted, not timed by the
asks: where a tail comes from pauses, and which process pauses.
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from functools import partial
from pathlib import Path
from typing import Final

from actormem.benchmarks._common import (
    Row,
    above,
    at_least,
    message_texts,
    percentile,
    process_cpu,
    steps_so_far,
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
from actormem.runtime.collector import RECORD_ENV, Collections
from actormem.runtime.redis import connect
from actormem.runtime.redis.trace import (
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

__all__ = (
    "NAME",
    "add_arguments",
    "gc_rows",
    "run",
    "stage_rows",
)

NAME = "redis_latency"

#: Seconds the worker may take to work off what an overloaded level left queued.
_SETTLE_TIMEOUT = 600.0

#: A level's step, as :func:`actormem.benchmarks.latency.measure` names it:
#: ``context() at 5,000/s (5,000/s): actormem``.
_LEVEL_STEP: Final = re.compile(
    r"^(?P<ask>\S+) (?P<level>at .+) \((?P<rate>[\d,]+)/s\): (?P<who>.+)$"
)


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
    parser.add_argument(
        "--gc",
        action="store_true",
        help="also report each level's garbage collections per 10,000 asks, by process",
    )


async def run(args: argparse.Namespace) -> list[Row]:
    """One worker process, a client runtime here (see :func:`actormem.benchmarks.latency.measure`),
    next to the raw redis-py round trip on the same server."""
    payload = wire_payload(message_texts(1)[0])
    levels: list[tuple[str, float, float]] = []
    tracer = Tracer() if args.trace else None
    collections = Collections() if args.gc else None
    with (
        _temp_dir(args.trace, "actormem-trace-") as traces,
        _temp_dir(args.gc, "actormem-gc-") as records,
    ):
        env = {TRACE_ENV: str(traces)} if traces is not None else {}
        if records is not None:
            env[RECORD_ENV] = str(records)
        async with server() as redis:
            config = redis_app_config(redis.url)
            client = connect(config.redis)
            try:
                async with (
                    workers(config, 1, env) as procs,
                    client_runtime(config, tracer) as (rt, _transport),
                    raw_responder(redis.url, env) as raw,
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
                    # This process is both the client and the raw asker.
                    with collections if collections is not None else nullcontext():
                        rows = await measure(
                            rt, "Redis", args, baseline, args.fixed_rate, settle, on_level, ours
                        )
                    measured = time.time()
            finally:
                await client.aclose()
        if tracer is not None and traces is not None:
            # The workers wrote theirs as they exited.
            worker_records = [load(path) for path in sorted(traces.glob("*.msgpack"))]
            rows += stage_rows(tracer.records(), worker_records, levels)
        if collections is not None and records is not None:
            # The worker and the responder wrote theirs as they exited.
            def written(pid: int | None) -> Collections | None:
                path = records / f"gc-{pid}.msgpack"
                return Collections.load(path) if path.exists() else None

            by_role = {
                "client": collections,
                "worker": written(worker_pid),
                "raw asker": collections,
                "raw responder": written(responder_pid),
            }
            rows += gc_rows(steps_so_far(), measured, args.seconds, by_role)
    return rows


@contextmanager
def _temp_dir(wanted: bool, prefix: str) -> Iterator[Path | None]:
    """A temporary directory (for the worker processes to write their records to),
    if ``wanted``."""
    if not wanted:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as directory:
        yield Path(directory)


def gc_rows(
    steps: list[tuple[float, str]],
    ended: float,
    seconds: float,
    by_role: dict[str, Collections | None],
) -> list[Row]:
    """Per level of ``steps`` (when each started, its label; the last ends at
    ``ended``), per process of ``by_role`` (``client`` and ``worker`` for actormem's
    levels, ``raw asker`` and ``raw responder`` for the baseline's): the pause of
    the collections that ended during it, per 10,000 asks offered (``seconds`` at
    the level's rate), with how many of each generation and the longest. A level
    shorter than half of ``seconds`` did not run (a baseline above its peak); a
    process whose record is None (it did not write one) has no rows."""
    rows: list[Row] = []
    bounds = [*(began for began, _ in steps[1:]), ended]
    for (began, label), until in zip(steps, bounds, strict=True):
        level = _LEVEL_STEP.match(label)
        if level is None or until - began < seconds / 2:  # a baseline skipped over its peak
            continue
        ours = level["who"] == "actormem"
        asks = max(1, int(float(level["rate"].replace(",", "")) * seconds))
        per = 10_000 / asks
        for role in ("client", "worker") if ours else ("raw asker", "raw responder"):
            record = by_role[role]
            if record is None:
                continue
            found = record.during(began, until)
            pauses = [c.pause for c in found]
            rows.append(
                Row(
                    name=f"Redis {level['ask']} {level['level']}: {role} gc pause per 10,000 asks",
                    value=sum(pauses) * 1e3 * per,
                    unit="ms",
                    extra={
                        "process": role,
                        "level": f"{level['ask']} {level['level']}",
                        "asks": asks,
                        "collections_per_10k": [
                            sum(c.generation == g for c in found) * per for g in (0, 1, 2)
                        ],
                        "longest_ms": max(pauses, default=0.0) * 1e3,
                        "collected_per_10k": sum(c.collected for c in found) * per,
                    },
                )
            )
    return rows


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
