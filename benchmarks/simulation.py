"""The default simulation's messages/s over Redis next to in process, in alternating runs.

Each pair runs the simulation ``actormem simulate`` runs (``--config``, the town by
default) twice with the same seed: once with ``--transport local`` (every agent in
this process) and once with ``--transport redis`` (the agents' memories over Redis
streams, on a private embedded ``redis-server``, as ``make run`` does). The pairs
alternate which transport goes first, so a machine that slows down over the run
weighs on both. A row per pair gives the Redis run's messages/s as a ratio of the
local run's; the last row counts the pairs whose two runs did not process the same
number of messages or find the same number of planted facts (the same seed must
give the same run; how many were found by search or in context is in each row's
extra, with each run's CPU time in this process: the Redis run's work beside the
actors' own, the embedded redis-server not counted, and the compressions still
queued when it measured its agents: 0 unless its wait for them ran out).
"""

from __future__ import annotations

import argparse
import functools
import time
from pathlib import Path
from statistics import mean
from typing import Any

import msgspec

from actormem.actors.app.simulation import SimulationReport, run_simulation
from actormem.actors.config import AppConfig, load_app_config
from actormem.benchmarks._common import (
    Row,
    at_least,
    compared,
    on_stop,
    plan,
    recorded_rows,
    step,
)

NAME = "simulation"

#: Issue 22's target: the simulation over Redis at least this share of in process.
TARGET = 0.75

TRANSPORTS = ("local", "redis")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", metavar="PATH", default="configs/town.toml", help="the simulation's config"
    )
    parser.add_argument("--seed", type=int, default=7, help="the seed of every run")
    parser.add_argument(
        "--runs", type=at_least(1), default=2, help="pairs of runs (one local, one redis each)"
    )
    parser.add_argument("--agents", type=at_least(1), help="override simulation.agents")
    parser.add_argument("--steps", type=at_least(1), help="override simulation.steps")


def run_config(args: argparse.Namespace, transport: str) -> AppConfig:
    """The config ``actormem simulate --transport TRANSPORT --seed SEED`` runs with."""
    config = load_app_config(Path(args.config))
    simulation: dict[str, Any] = {"seed": args.seed}
    if args.agents:
        simulation["agents"] = args.agents
    if args.steps:
        simulation["steps"] = args.steps
    return msgspec.structs.replace(
        config,
        simulation=msgspec.structs.replace(config.simulation, **simulation),
        runtime=msgspec.structs.replace(config.runtime, transport=transport),
    )


#: What the same seed must reproduce on either transport.
AGREE = ("messages_processed", "facts_found")


def _outcome(report: SimulationReport, cpu_s: float) -> dict[str, Any]:
    """A run's figures for its row: what must agree, how the facts were found, its time
    and this process's CPU time in it (``cpu_s``; the embedded redis-server's not
    counted), and its compressions still queued at the end."""
    return {
        "messages_processed": report.messages_processed,
        "facts_found": report.facts_found,
        "facts_found_by_search": report.facts_found_by_search,
        "facts_found_in_context": report.facts_found_in_context,
        "elapsed_s": report.elapsed_s,
        "cpu_s": round(cpu_s, 3),
        "cpu_ms_per_message": round(1000 * cpu_s / max(1, report.messages_processed), 4),
        "compressions_queued_at_end": report.compressions_queued_at_end,
    }


def _stopped(
    pairs: list[dict[str, SimulationReport]],
    reports: dict[str, SimulationReport],
    cpu: dict[str, float],
    pair: int,
    size: str,
) -> list[Row]:
    """The rows of a run stopped in pair ``pair``: the run of it that finished, alone
    (no ratio: it has nothing to be compared with), then the finished pairs' closing
    rows (:func:`_closing`)."""
    rows = [
        Row(
            name=f"simulation, pair {pair} ({size}; {transport} only: the pair was stopped)",
            value=report.messages_per_s,
            unit="msg/s",
            extra={"pair": pair, transport: _outcome(report, cpu[transport])},
        )
        for transport, report in reports.items()
        if len(reports) < len(TRANSPORTS)
    ]
    return rows + _closing(pairs) if pairs else rows


def _closing(pairs: list[dict[str, SimulationReport]]) -> list[Row]:
    """The rows after the pairs' own: their mean (two pairs or more), and how many
    pairs' runs did not agree (:data:`AGREE`)."""
    rows = []
    if len(pairs) > 1:
        rows.append(
            compared(
                f"simulation over Redis, mean of {len(pairs)} pairs",
                mean(p["redis"].messages_per_s for p in pairs),
                "msg/s",
                f"in process, mean of {len(pairs)} pairs",
                mean(p["local"].messages_per_s for p in pairs),
                target=f">= {TARGET}x",
            )
        )
    differ = [i for i, p in enumerate(pairs, 1) if not _agree(p["local"], p["redis"])]
    rows.append(
        Row(
            name="pairs whose two runs differ in messages processed or facts found (same seed)",
            value=len(differ),
            unit="pairs",
            target="0",
            extra={"pairs": differ},
        )
    )
    return rows


def _agree(local: SimulationReport, redis: SimulationReport) -> bool:
    """Whether two runs of the same seed processed and found the same (:data:`AGREE`)."""
    return all(getattr(local, key) == getattr(redis, key) for key in AGREE)


async def run(args: argparse.Namespace) -> list[Row]:
    """``--runs`` pairs of a local and a Redis run, alternating which goes first."""
    configs = {transport: run_config(args, transport) for transport in TRANSPORTS}
    sim = configs["local"].simulation
    size = f"{sim.agents} agents, {sim.steps} steps, seed {sim.seed}"
    rows = recorded_rows()
    plan(2 * args.runs)
    pairs: list[dict[str, SimulationReport]] = []
    for pair in range(1, args.runs + 1):
        order = TRANSPORTS if pair % 2 else TRANSPORTS[::-1]
        reports: dict[str, SimulationReport] = {}
        cpu: dict[str, float] = {}
        on_stop(functools.partial(_stopped, pairs, reports, cpu, pair, size))
        for transport in order:
            step(f"pair {pair}/{args.runs}: {transport}")
            started = time.process_time()
            reports[transport] = await run_simulation(configs[transport])
            cpu[transport] = time.process_time() - started
        pairs.append(reports)
        local, redis = reports["local"], reports["redis"]
        rows.append(
            compared(
                f"simulation over Redis, pair {pair} ({size}; {order[0]} first)",
                redis.messages_per_s,
                "msg/s",
                f"in process, pair {pair}",
                local.messages_per_s,
                target=f">= {TARGET}x",
                extra={
                    "pair": pair,
                    "first": order[0],
                    "local": _outcome(local, cpu["local"]),
                    "redis": _outcome(redis, cpu["redis"]),
                },
            )
        )
    on_stop(list)
    rows += _closing(pairs)
    return rows
