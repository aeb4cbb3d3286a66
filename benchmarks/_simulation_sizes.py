"""``bench simulation --agents N N ...``: the simulation at several sizes, each run in a
process of its own, in process and over Redis with worker processes.

Each run is ``actormem simulate CONFIG --agents N --seed S --transport T`` (with
``--workers W`` over Redis), its report read back from ``--json``. A row per run
gives its messages/s; its extra holds the deliveries per share, the peak resident
memory (the largest process of the run, from the operating system's accounting of
the finished process tree), the compressions still queued when it ended, and its
failures. A row per size gives the Redis run's messages/s against the in-process
run's; the last row, how much the deliveries per share vary over the sizes.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO, Any, Final

import anyio.to_thread
import msgspec

from actormem.benchmarks._common import Row, compared, plan, recorded_rows, step

__all__ = ("FLAT", "run_sizes")

#: The deliveries per share may differ by at most this factor over the sizes.
FLAT: Final = 1.2
#: Issue 38's target: over Redis with workers, this share of the in-process rate.
REDIS_TARGET: Final = 0.75


class _Outcome(msgspec.Struct, kw_only=True):
    """What one run's process left: its exit code, peak memory, report and last words."""

    code: int
    peak_rss_mb: float
    report: dict[str, Any] | None
    error: str = ""


def _command(args: argparse.Namespace, agents: int, transport: str, out: Path) -> list[str]:
    cmd = [sys.executable, "-m", "actormem", "simulate", args.config]
    cmd += ["--agents", str(agents), "--seed", str(args.seed), "--transport", transport]
    if args.steps:
        cmd += ["--steps", str(args.steps)]
    if transport == "redis" and args.workers:
        cmd += ["--workers", str(args.workers)]
    return [*cmd, "--json", str(out), "--no-run-dir", "--no-progress"]


def _start(cmd: list[str], err: IO[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)


def _read(out: Path) -> dict[str, Any] | None:
    return msgspec.json.decode(out.read_bytes()) if out.exists() else None


async def _run_one(cmd: list[str], out: Path) -> _Outcome:
    """Run ``cmd`` to its end (killed if this is cancelled); its peak memory is the
    largest of its process tree's."""
    with tempfile.TemporaryFile("w+") as err:
        proc = _start(cmd, err)
        try:
            _, status, usage = await anyio.to_thread.run_sync(
                os.wait4, proc.pid, 0, abandon_on_cancel=True
            )
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        code = proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        last = err.read().strip().splitlines()[-1:] or [""]
    return _Outcome(
        code=code,
        peak_rss_mb=round(usage.ru_maxrss / 1024, 1),  # KiB on Linux
        report=_read(out),
        error=last[0][:300] if code else "",
    )


def _figures(outcome: _Outcome) -> dict[str, Any]:
    report = outcome.report or {}
    shared = report.get("insights_shared", 0)
    delivered = report.get("insights_delivered", 0)
    runtime = report.get("runtime", {})
    turns = report.get("agents", 0) * report.get("steps_completed", 0)
    return {
        "exit_code": outcome.code,
        "error": outcome.error,
        "messages_processed": report.get("messages_processed", 0),
        "elapsed_s": report.get("elapsed_s", 0.0),
        "insights_shared": shared,
        "insights_delivered": delivered,
        "deliveries_per_share": round(delivered / shared, 2) if shared else None,
        "deliveries_per_agent_step": round(delivered / turns, 3) if turns else None,
        "peak_rss_mb": outcome.peak_rss_mb,
        "compressions_queued_at_end": report.get("compressions_queued_at_end"),
        "facts_found": report.get("facts_found", 0),
        "facts_planted": report.get("facts_planted", 0),
        "actor_failures": report.get("actor_failures", 0),
        "asks_expired": runtime.get("expired", 0),
        "steps_completed": report.get("steps_completed", 0),
    }


async def run_sizes(args: argparse.Namespace) -> list[Row]:
    """For each ``--agents`` size: a run in process and one over Redis (with
    ``--workers``), each in a process of its own."""
    rows = recorded_rows()
    transports = ("local", "redis")
    plan(len(args.agents) * len(transports))
    per_share: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="actormem-bench-") as tmp:
        for agents in args.agents:
            rates: dict[str, float] = {}
            for transport in transports:
                label = "in process" if transport == "local" else _redis_label(args.workers)
                step(f"{agents:,} agents, {label}")
                out = Path(tmp) / f"{agents}-{transport}.json"
                cmd = _command(args, agents, transport, out)
                outcome = await _run_one(cmd, out)
                figures = _figures(outcome)
                rate = float((outcome.report or {}).get("messages_per_s", 0.0))
                rates[transport] = rate
                if transport == "local" and figures["deliveries_per_share"] is not None:
                    per_share[agents] = figures["deliveries_per_share"]
                rows.append(
                    Row(
                        name=f"simulation, {agents:,} agents, {label}",
                        value=rate,
                        unit="msg/s",
                        extra={"agents": agents, "transport": transport, **figures},
                    )
                )
            if rates["local"] > 0:
                rows.append(
                    compared(
                        f"simulation, {agents:,} agents: {_redis_label(args.workers)}",
                        rates["redis"],
                        "msg/s",
                        "in process",
                        rates["local"],
                        target=f">= {REDIS_TARGET}x",
                        extra={"agents": agents},
                    )
                )
    if len(per_share) > 1:
        low, high = min(per_share.values()), max(per_share.values())
        rows.append(
            Row(
                name="deliveries per share, largest over smallest of the sizes (in process)",
                value=round(high / low, 3) if low else 0.0,
                unit="x",
                target=f"<= {FLAT}",
                extra={"per_share": {str(k): v for k, v in per_share.items()}},
            )
        )
    return rows


def _redis_label(workers: int) -> str:
    if not workers:
        return "over Redis (embedded worker)"
    return f"over Redis, {workers} worker{'s' if workers > 1 else ''}"
