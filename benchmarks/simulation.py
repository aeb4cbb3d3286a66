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

With several sizes (``--agents 1000 10000``) or ``--workers``, it runs
:mod:`actormem.benchmarks._simulation_sizes` instead: each size in process and over
Redis with worker processes, each run in a process of its own.

With ``--brain llm`` the agents' brain is the llm brain, against a loopback
OpenAI-compatible model in a child process (:mod:`actormem.benchmarks._chat_server`),
and each pair adds a row per run: the runtime's own time per model call (the
report's ``own_ms_per_model_call_p99``, its p50 in the extra), against the target
:data:`OWN_MS_TARGET`. ``--brain llm --agents 1000 --steps 3 --runs 1`` is the
1,000-agent run. The loopback model answers at once by default, so the run keeps
the event loop busy and the own time includes the other agents' turns;
``--model-latency MS`` makes it answer as a hosted model would, MS milliseconds
after each request.
"""

from __future__ import annotations

import argparse
import functools
import time
from contextlib import ExitStack
from pathlib import Path
from statistics import mean
from typing import Any

import msgspec

from actormem.actors.app.simulation import SimulationReport, run_simulation
from actormem.actors.config import AppConfig, load_app_config
from actormem.benchmarks._chat_server import chat_server
from actormem.benchmarks._common import (
    Row,
    at_least,
    compared,
    on_stop,
    plan,
    recorded_rows,
    step,
)
from actormem.benchmarks._simulation_sizes import run_sizes
from actormem.runtime.errors import ConfigError

__all__ = (
    "AGREE",
    "BRAIN_HELP",
    "MAX_IN_FLIGHT_HELP",
    "NAME",
    "OWN_MS_TARGET",
    "TARGET",
    "TRANSPORTS",
    "add_arguments",
    "run",
    "run_config",
)

NAME = "simulation"

#: Issue 22's target: the simulation over Redis at least this share of in process.
TARGET = 0.75

TRANSPORTS = ("local", "redis")

BRAIN_HELP = "the agents' brain (llm: against a loopback model in a child process)"
MAX_IN_FLIGHT_HELP = "override simulation.brain.max_in_flight (--brain llm)"
MODEL_LATENCY_HELP = "milliseconds the loopback model takes to answer (--brain llm)"

#: The runtime's own time per model call (p99, ms) the llm brain's runs aim under.
OWN_MS_TARGET = 5.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", metavar="PATH", default="configs/town.toml", help="the simulation's config"
    )
    parser.add_argument("--seed", type=int, default=7, help="the seed of every run")
    parser.add_argument(
        "--runs", type=at_least(1), default=2, help="pairs of runs (one local, one redis each)"
    )
    parser.add_argument(
        "--agents",
        type=at_least(1),
        nargs="+",
        metavar="N",
        help="override simulation.agents; several sizes run each in its own process",
    )
    parser.add_argument(
        "--workers",
        type=at_least(0),
        default=0,
        help="worker processes of the Redis runs (with several sizes; 0: the embedded one)",
    )
    parser.add_argument("--steps", type=at_least(1), help="override simulation.steps")
    brains = ("scripted", "llm")
    parser.add_argument("--brain", choices=brains, default="scripted", help=BRAIN_HELP)
    parser.add_argument("--max-in-flight", type=at_least(1), help=MAX_IN_FLIGHT_HELP)
    parser.add_argument(
        "--model-latency", type=at_least(0), default=0, metavar="MS", help=MODEL_LATENCY_HELP
    )


def run_config(args: argparse.Namespace, transport: str, base_url: str = "") -> AppConfig:
    """The config ``actormem simulate --transport TRANSPORT --seed SEED`` runs with
    (with ``--brain llm``: against the model at ``base_url``)."""
    config = load_app_config(Path(args.config))
    simulation: dict[str, Any] = {"seed": args.seed}
    if args.agents:
        simulation["agents"] = args.agents[0]
    if args.steps:
        simulation["steps"] = args.steps
    if getattr(args, "brain", "scripted") == "llm":
        brain: dict[str, Any] = {"kind": "llm", "base_url": base_url, "model": "loopback"}
        if args.max_in_flight:
            brain["max_in_flight"] = args.max_in_flight
        simulation["brain"] = msgspec.structs.replace(config.simulation.brain, **brain)
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
        "llm_calls": report.llm_calls,
        "own_ms_per_model_call_p50": report.own_ms_per_model_call_p50,
        "own_ms_per_model_call_p99": report.own_ms_per_model_call_p99,
        "compressions_queued_at_end": report.compressions_queued_at_end,
    }


def _own_rows(reports: dict[str, SimulationReport], cpu: dict[str, float], pair: int) -> list[Row]:
    """The runtime's own time per model call of each run of a pair that called the
    model (none for the scripted brain). Beside it, this process's CPU time per
    call (``cpu_ms_per_model_call``): a loop that is never idle makes each call
    wait for about that much of the others' work."""
    return [
        Row(
            name=f"runtime's own time per model call, p99 ({transport}, pair {pair})",
            value=report.own_ms_per_model_call_p99,
            unit="ms",
            target=f"< {OWN_MS_TARGET:g} ms",
            extra={
                "p50_ms": report.own_ms_per_model_call_p50,
                "cpu_ms_per_model_call": round(1000 * cpu[transport] / report.llm_calls, 3),
                "llm_calls": report.llm_calls,
                "elapsed_s": report.elapsed_s,
            },
        )
        for transport, report in reports.items()
        if report.llm_calls
    ]


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
    """``--runs`` pairs of a local and a Redis run, alternating which goes first; with
    several sizes or ``--workers``, each size once per transport (see module doc)."""
    if (args.agents and len(args.agents) > 1) or getattr(args, "workers", 0):
        if getattr(args, "brain", "scripted") != "scripted":
            raise ConfigError(
                "--brain llm runs one size, in pairs: give one --agents, no --workers"
            )
        return await run_sizes(args)
    with ExitStack() as stack:
        url = ""
        if getattr(args, "brain", "scripted") == "llm":
            url = stack.enter_context(chat_server(getattr(args, "model_latency", 0)))
        configs = {transport: run_config(args, transport, url) for transport in TRANSPORTS}
        return await _pairs(args, configs)


async def _pairs(args: argparse.Namespace, configs: dict[str, AppConfig]) -> list[Row]:
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
        rows += _own_rows(reports, cpu, pair)
    on_stop(list)
    rows += _closing(pairs)
    return rows
