"""The ``actormem bench`` command (an ``actormem.commands`` entry point)."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ("add_commands",)


def add_commands(subs: Any) -> None:
    """Add ``bench NAME [options]``, which runs the benchmark runner
    (:mod:`actormem.benchmarks.__main__`)."""
    bench = subs.add_parser(
        "bench",
        help=(
            "run a benchmark (throughput, latency, scale, context, compression, peers, "
            "load, redis_throughput, redis_latency, distributed, redis_scale, retrieval, "
            "simulation)"
        ),
        description="Run a benchmark: 'actormem bench NAME --help' lists its options.",
        add_help=False,
    )
    # The runner parses NAME and its options; only a bare --help is taken here.
    bench.add_argument("-h", "--help", action="store_true", help="list the benchmarks")
    bench.add_argument("args", nargs=argparse.REMAINDER, help="NAME [options]")
    bench.set_defaults(func=_bench)


def _bench(args: argparse.Namespace) -> int:
    # Imported here: the benchmark modules are not needed for any other command.
    from actormem.benchmarks.__main__ import main as bench_main

    try:
        return bench_main(["--help", *args.args] if args.help else args.args, "actormem bench")
    except SystemExit as exc:  # argparse of the benchmark runner: --help, bad options
        return int(exc.code or 0)
