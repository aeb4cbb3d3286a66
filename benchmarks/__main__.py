"""The benchmark runner: ``actormem bench NAME [options]`` (``python -m actormem.benchmarks``
runs the same).

Each benchmark prints a table of its figures next to raw baselines measured in the
same run, writes the result to a file of its own (``OUT/NAME-<UTC time>.json``),
and with ``--plot`` draws ``OUT/NAME-<UTC time>.png`` from this run's result and
the results given with ``--compare``. Progress goes to stderr (see
:class:`ProgressDisplay`). SIGINT or SIGTERM stops a benchmark: it says so in one
line, stops its worker processes and servers, writes the rows it finished as
``NAME-<UTC time>.partial.json`` (``"partial": true``) and exits with 130 or 143.
"""

from __future__ import annotations

import argparse
import importlib
import re
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from redis.exceptions import RedisError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table

from actormem.benchmarks._common import (
    BenchResult,
    Recorder,
    machine,
    read_result,
    recording,
    write_result,
)
from actormem.runtime import ActormemError
from actormem.runtime.cli import OneLineParser, StopSignals, run_loop
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
    "retrieval",
    "simulation",
)

#: The optional packages benchmarks import, and the extra that installs each.
EXTRAS = {"pykka": "bench-peers", "autogen_core": "bench-peers", "matplotlib": "plots"}

#: How users call the runner (in usage lines, errors and the results' command).
PROG = "actormem bench"

DESCRIPTION = """\
Run a benchmark. It prints a table of its figures, each next to a raw baseline
measured in the same run: ratio = value / baseline, and the "better" column says
whether a higher or a lower ratio is better. The result goes to a file of its own
per run, OUT/NAME-<UTC time>.json.

--plot draws OUT/NAME-<UTC time>.png from this run's result, plus earlier results
given with --compare FILE... (needs the plots extra: pip install 'actormem[plots]').
Progress goes to stderr: a bar on a terminal, one line per step otherwise; --quiet
turns it off. SIGINT or SIGTERM stops a run: it writes the rows it finished as
OUT/NAME-<UTC time>.partial.json and exits with 130 or 143.

'actormem bench NAME --help' shows what a benchmark measures and its options."""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions as written, and every option's default after its help."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "%(default)" in text
            or not action.option_strings
            or any(default is none for none in (None, False, argparse.SUPPRESS))
            or default == []
        ):
            return text
        shown = " ".join(map(str, default)) if isinstance(default, list) else str(default)
        return f"{text} (default: {shown.replace('%', '%%')})"


def _plain(text: str) -> str:
    """A docstring as a terminal shows it: no ``literal`` quotes or :role:`x` marks."""
    return re.sub(r":\w+:`~?([^`]*)`", r"\1", text.replace("``", ""))


def summary(module: ModuleType) -> str:
    """A benchmark's one-line description: the first line of its docstring."""
    return _plain((module.__doc__ or "").strip().splitlines()[0])


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The runner's parser; ``prog`` is how the user called it (for usage lines)."""
    parser = OneLineParser(prog=prog, description=DESCRIPTION, formatter_class=HelpFormatter)
    subs = parser.add_subparsers(
        dest="name", metavar="NAME", required=True, parser_class=OneLineParser
    )
    for name in BENCHMARKS:
        module = importlib.import_module(f"actormem.benchmarks.{name}")
        # argparse formats help with %: a literal one ("p99 at 50% load") is doubled.
        sub = subs.add_parser(
            name,
            help=summary(module).replace("%", "%%"),
            description=_plain((module.__doc__ or "").strip()),
            formatter_class=HelpFormatter,
        )
        sub.add_argument(
            "--out",
            metavar="DIR",
            default="reports/bench",
            help="where the result (NAME-<UTC time>.json) and plots go",
        )
        sub.add_argument(
            "--plot", action="store_true", help="also draw PNG plots of this run's result"
        )
        sub.add_argument(
            "--compare",
            metavar="FILE",
            nargs="+",
            type=Path,
            default=[],
            help="earlier result files to draw on the same plots (implies --plot)",
        )
        sub.add_argument(
            "--quiet", action="store_true", help="no progress (or live display) on stderr"
        )
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


def ratio_text(ratio: float) -> str:
    """A ratio with two significant figures at least (``0.0031x``, not ``0.00x``)."""
    if ratio >= 10:
        return f"{ratio:,.0f}x"
    if ratio >= 0.1:
        return f"{ratio:.2f}x"
    return f"{ratio:.2g}x"


def print_result(result: BenchResult, console: Console) -> None:
    partial = "  PARTIAL (stopped)" if result.partial else ""
    table = Table(title=f"{result.name}  ({result.command}){partial}", title_justify="left")
    for col in ("measure", "value", "baseline", "ratio", "better", "target"):
        table.add_column(col, justify="right" if col in ("value", "baseline", "ratio") else "left")
    for row in result.rows:
        table.add_row(
            row.name,
            f"{figure(row.value)} {row.unit}".strip(),
            f"{figure(row.baseline_value)} {row.unit} ({row.baseline})"
            if row.baseline_value
            else "",
            ratio_text(row.ratio) if row.ratio is not None else "",
            row.better if row.ratio is not None else "",
            row.target or "",
        )
    console.print(table)
    if result.partial:
        during = f" during: {result.stopped_during}" if result.stopped_during else ""
        console.print(f"stopped{during}; the rows above are the ones it finished")


class ProgressDisplay:
    """A run's steps on stderr: a bar on a terminal, one line per step otherwise
    (``PROG NAME: [2/8] 100 agents: actormem add``), nothing when ``quiet``."""

    def __init__(self, who: str, quiet: bool) -> None:
        self.who = who
        self.console = Console(stderr=True)
        self.mode = "off" if quiet else "bar" if self.console.is_terminal else "lines"
        self._bar: Progress | None = None
        self._task: Any = None

    def show(self, done: int, total: int, label: str) -> None:
        if self.mode == "lines":
            print(f"{self.who}: [{done + 1}/{total}] {label}", file=sys.stderr, flush=True)
        elif self.mode == "bar":
            if self._bar is None:
                self._bar = Progress(
                    "{task.description}",
                    BarColumn(),
                    MofNCompleteColumn(),
                    TimeElapsedColumn(),
                    console=self.console,
                    transient=True,
                )
                self._bar.start()
                self._task = self._bar.add_task(label, total=total)
            self._bar.update(self._task, completed=done, total=total, description=label)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


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


def _error(who: str, message: str) -> int:
    print(f"{who}: error: {message}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    args = build_parser(prog).parse_args(argv)
    configure_logging("console", "warning")
    module = importlib.import_module(f"actormem.benchmarks.{args.name}")
    who = f"{prog} {args.name}"
    command = f"{prog} " + shlex.join(list(argv if argv is not None else sys.argv[1:]))
    args.plot = args.plot or bool(args.compare)
    # What a run needs is checked before it starts, not after an hour of it.
    needs = [*getattr(module, "NEEDS", ()), *(["matplotlib"] if args.plot else [])]
    for needed in needs:
        try:
            importlib.import_module(needed)
        except ModuleNotFoundError as exc:
            if _missing_extra(who, exc.name or needed):
                return 2
            raise
    try:
        compare = [read_result(path) for path in args.compare]
    except ValueError as exc:
        return _error(who, f"--compare: {exc}")
    for path, earlier in zip(args.compare, compare, strict=True):
        if not _drawn_together(earlier.name, args.name):
            why = f"a {earlier.name} result, not drawn on a {args.name} plot"
            return _error(who, f"--compare: {path}: {why}")
    started = time.time()
    stops = StopSignals(
        lambda: "writing the rows it finished, stopping what it started...", prog=who
    )
    progress = ProgressDisplay(who, args.quiet)
    recorder = Recorder(progress.show)
    try:
        with recording(recorder):
            rows = run_loop(lambda: stops.run(lambda: module.run(args), cancel_with=list))
    except ActormemError as exc:  # a bad config, a deployment without workers...
        return _error(who, str(exc))
    except RedisError as exc:  # a raw baseline's own redis-py client
        return _error(who, f"Redis: {exc}")
    except ModuleNotFoundError as exc:
        if not _missing_extra(who, exc.name or ""):
            raise
        return 2
    finally:
        progress.close()
    partial = stops.requested.is_set()
    result = BenchResult(
        name=args.name,
        command=command,
        rows=recorder.finished() if partial else rows,
        machine=machine(),
        started=started,
        elapsed_s=round(time.time() - started, 2),
        partial=partial,
        stopped_during=recorder.current if partial else "",
    )
    console = Console(width=None if sys.stdout.isatty() else 150)
    print_result(result, console)
    path = write_result(result, Path(args.out))
    console.print(f"written: {path}")
    if args.plot:
        _plot(result, compare, path.with_suffix(".png"), console)
    return stops.exit_code


def _drawn_together(name: str, other: str) -> bool:
    """Whether results of benchmarks ``name`` and ``other`` share a plot."""
    from actormem.benchmarks._plots import PLOTS

    plot = PLOTS.get(name)
    return plot is not None and plot is PLOTS.get(other)


def _plot(result: BenchResult, compare: list[BenchResult], path: Path, console: Console) -> None:
    """Draw the run's plot, or say in one line why there is none."""
    from actormem.benchmarks._plots import PLOTS, draw

    if result.partial:
        console.print("no plots: the run was stopped before it finished")
    elif result.name not in PLOTS:
        console.print(f"no plots: {result.name} has none")
    else:
        for png in draw(result, compare, path):
            console.print(f"plot: {png}")


if __name__ == "__main__":
    sys.exit(main())
