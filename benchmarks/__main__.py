"""The benchmark runner: ``python -m actormem.benchmarks NAME [options]``.

``actormem bench NAME [options]`` runs the same.

Each benchmark prints a table of its figures with their raw baselines and ratios,
writes ``reports/bench/<name>.json``, and with ``--plot`` draws PNGs (needs the
``plots`` extra: matplotlib).

SIGINT or SIGTERM stops a benchmark: it says so in one line, stops its worker
processes and servers, writes its JSON marked ``"partial": true`` (as
``<name>.partial.json``, keeping the last full result) and exits with 130 or 143.
"""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import anyio
from redis.exceptions import RedisError
from rich.console import Console
from rich.table import Table

from actormem.benchmarks._common import BenchResult, Row, machine, write_result
from actormem.runtime import ActormemError
from actormem.runtime.cli import OneLineParser, StopSignals
from actormem.runtime.logging import configure_logging

BENCHMARKS = (
    "throughput",
    "latency",
    "scale",
    "context",
    "compression",
    "peers",
    "load",
    "redis_throughput",
    "redis_latency",
    "distributed",
    "redis_scale",
)

#: The optional packages benchmarks import, and the extra that installs each.
EXTRAS = {"pykka": "bench-peers", "autogen_core": "bench-peers", "matplotlib": "plots"}

#: How the runner is called when run as a module.
PROG = "python -m actormem.benchmarks"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The runner's parser; ``prog`` is how the user called it (for usage lines)."""
    parser = OneLineParser(prog=prog, description=__doc__)
    subs = parser.add_subparsers(
        dest="name", metavar="NAME", required=True, parser_class=OneLineParser
    )
    for name in BENCHMARKS:
        module = importlib.import_module(f"actormem.benchmarks.{name}")
        summary = (module.__doc__ or "").splitlines()[0]
        # argparse formats help with %: a literal one ("p99 at 50% load") is doubled.
        sub = subs.add_parser(name, help=summary.replace("%", "%%"))
        sub.add_argument("--out", default="reports/bench", help="where the JSON goes")
        sub.add_argument("--plot", action="store_true", help="also write PNG plots")
        module.add_arguments(sub)
    return parser


def figure(value: float) -> str:
    """``value`` with as many decimals as its size deserves (0.012 ms, 3.4 ms, 65,327);
    a whole number (a count) with none."""
    if abs(value) >= 1e4 or float(value).is_integer():
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:,.1f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def print_result(result: BenchResult, console: Console) -> None:
    partial = "  PARTIAL (stopped)" if result.partial else ""
    table = Table(title=f"{result.name}  ({result.command}){partial}", title_justify="left")
    for col in ("measure", "value", "baseline", "ratio", "target"):
        table.add_column(col, justify="left" if col in ("measure", "target") else "right")
    for row in result.rows:
        table.add_row(
            row.name,
            f"{figure(row.value)} {row.unit}",
            f"{figure(row.baseline_value)} ({row.baseline})" if row.baseline_value else "",
            f"{row.ratio:.2f}x" if row.ratio is not None else "",
            row.target or "",
        )
    console.print(table)


def _missing_extra(who: str, module: str) -> bool:
    """Say in one line which extra installs ``module``; False if none does."""
    extra = EXTRAS.get(module.partition(".")[0])
    if extra is None:
        return False
    print(
        f"{who}: error: needs the {extra} extra (no module named {module!r}): "
        f"pip install 'actormem[{extra}]'",
        file=sys.stderr,
    )
    return True


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    args = build_parser(prog).parse_args(argv)
    configure_logging("console", "warning")
    module = importlib.import_module(f"actormem.benchmarks.{args.name}")
    command = f"{prog} " + shlex.join(list(argv if argv is not None else sys.argv[1:]))
    started = time.time()
    stops = StopSignals(
        lambda: "stopping its workers and servers, writing a partial result...",
        prog=f"{prog} {args.name}",
    )
    for needed in getattr(module, "NEEDS", ()):
        try:
            importlib.import_module(needed)
        except ModuleNotFoundError as exc:  # before the run, not halfway through it
            if _missing_extra(f"{prog} {args.name}", exc.name or needed):
                return 2
            raise
    try:
        rows: list[Row] = anyio.run(lambda: stops.run(lambda: module.run(args), cancel_with=list))
    except ActormemError as exc:  # a bad config, a deployment without workers...
        print(f"{prog} {args.name}: error: {exc}", file=sys.stderr)
        return 2
    except RedisError as exc:  # a raw baseline's own redis-py client
        print(f"{prog} {args.name}: error: Redis: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        if not _missing_extra(f"{prog} {args.name}", exc.name or ""):
            raise
        return 2
    result = BenchResult(
        name=args.name,
        command=command,
        rows=rows,
        machine=machine(),
        started=started,
        elapsed_s=round(time.time() - started, 2),
        partial=stops.requested.is_set(),
    )
    console = Console(width=None if sys.stdout.isatty() else 150)
    print_result(result, console)
    path = write_result(result, Path(args.out))
    console.print(f"written: {path}")
    if args.plot and hasattr(module, "plot") and not result.partial:
        for png in module.plot(result, Path(args.out)):
            console.print(f"plot: {png}")
    return stops.exit_code


if __name__ == "__main__":
    sys.exit(main())
