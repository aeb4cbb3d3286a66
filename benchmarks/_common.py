"""What every benchmark shares: timing, percentiles, the result table and its JSON.

Every figure is reported next to a raw baseline measured in the same run, as a
ratio, so results hold on a noisy machine. Each benchmark adds its rows to the
run's :class:`Recorder` as it finishes them; the runner prints them as a table,
writes them as JSON (the rows finished so far when a signal stops the run), and
draws the benchmark's plots when matplotlib is installed and plots were asked for.
"""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import datetime
import itertools
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final

import anyio
import msgspec

__all__ = (
    "BenchResult",
    "Recorder",
    "Row",
    "above",
    "at_least",
    "bench_config",
    "better_of",
    "child_json",
    "compared",
    "fraction",
    "machine",
    "message_texts",
    "on_stop",
    "percentile",
    "plan",
    "read_result",
    "recorded_rows",
    "recording",
    "result_stem",
    "rss_bytes",
    "step",
    "steps_so_far",
    "timed_adds",
    "wait_processed",
    "write_result",
)


#: Units of rates: for these a higher figure is better; for every other unit (ms,
#: us, B, objects), a lower one.
_RATE_SUFFIX = "/s"


def better_of(unit: str) -> str:
    """Which way is better for a figure in ``unit``: ``higher`` for a rate, else ``lower``."""
    return "higher" if unit.endswith(_RATE_SUFFIX) else "lower"


class Row(msgspec.Struct, kw_only=True):
    """One measured line: a name, its figures, and optionally a ratio to a baseline.

    The ratio is always ``value / baseline_value`` (both in ``unit``); ``better`` says
    which way of it is better (``higher`` or ``lower``), from the unit when not given.
    """

    name: str
    value: float
    unit: str
    baseline: str | None = None
    baseline_value: float | None = None
    ratio: float | None = None
    target: str | None = None
    extra: dict[str, Any] = {}
    better: str | None = None

    def __post_init__(self) -> None:
        if self.ratio is not None and self.better is None:
            self.better = better_of(self.unit)


def compared(
    name: str,
    value: float,
    unit: str,
    baseline: str,
    baseline_value: float,
    *,
    target: str | None = None,
    extra: dict[str, Any] | None = None,
) -> Row:
    """A row measured next to a baseline in the same run: its ratio is value / baseline."""
    return Row(
        name=name,
        value=value,
        unit=unit,
        baseline=baseline,
        baseline_value=baseline_value,
        ratio=value / baseline_value,
        target=target,
        extra=extra or {},
    )


class BenchResult(msgspec.Struct, kw_only=True):
    """A benchmark's rows, how it was run, and where it ran (``partial``: stopped by
    a signal before it finished; ``rows`` then holds the rows it had finished, and
    ``stopped_during`` the step it was in)."""

    name: str
    command: str
    rows: list[Row]
    machine: dict[str, Any]
    started: float
    elapsed_s: float
    series: dict[str, Any] = {}
    partial: bool = False
    stopped_during: str = ""


class Recorder:
    """What a run under the runner has finished so far, and its progress.

    A benchmark adds each row to :func:`recorded_rows` as soon as it is measured, so
    a run stopped by a signal still reports the rows it finished; the runner shows
    the steps named with :func:`plan` and :func:`step` on stderr.

    Args:
        show: called with ``(done, total, label)`` when a step starts.
    """

    def __init__(self, show: Callable[[int, int, str], None] | None = None) -> None:
        self.rows: list[Row] = []
        self.total = 0
        self.done = 0
        self.current = ""
        self.summary: Callable[[], list[Row]] | None = None
        #: When each step started (wall clock), and its label, in order.
        self.steps: list[tuple[float, str]] = []
        self._show = show

    def step(self, label: str) -> None:
        """Start the next step (the one before is done)."""
        if self.current:
            self.done += 1
        self.current = label
        self.steps.append((time.time(), label))
        self.total = max(self.total, self.done + 1)
        if self._show is not None:
            self._show(self.done, self.total, label)

    def finished(self) -> list[Row]:
        """The rows finished so far, and what the work in flight summarises to."""
        rows = list(self.rows)
        if self.summary is not None:
            rows += self.summary()
        return rows


_RUN: contextvars.ContextVar[Recorder | None] = contextvars.ContextVar(
    "actormem_bench_run", default=None
)


@contextlib.contextmanager
def recording(recorder: Recorder) -> Iterator[Recorder]:
    """Make ``recorder`` the one the benchmark code run inside records to."""
    token = _RUN.set(recorder)
    try:
        yield recorder
    finally:
        _RUN.reset(token)


def recorded_rows() -> list[Row]:
    """The list a benchmark adds its rows to as it finishes them (the run's, under
    the runner; a list of its own otherwise)."""
    run = _RUN.get()
    return run.rows if run is not None else []


def plan(steps: int) -> None:
    """Say how many steps the run takes (for the progress display)."""
    run = _RUN.get()
    if run is not None:
        run.total = steps


def step(label: str) -> None:
    """Start the next step of the run, named ``label`` (``100 agents: raw anyio``)."""
    run = _RUN.get()
    if run is not None:
        run.step(label)


def steps_so_far() -> list[tuple[float, str]]:
    """When each step of the run so far started (wall clock), and its label (none
    outside the runner)."""
    run = _RUN.get()
    return list(run.steps) if run is not None else []


def on_stop(summary: Callable[[], list[Row]]) -> None:
    """If a signal stops the run, ``summary()`` gives rows for the work in flight
    (a load run summarises the seconds it ran)."""
    run = _RUN.get()
    if run is not None:
        run.summary = summary


def at_least(minimum: float, kind: Callable[[str], float] = int) -> Callable[[str], Any]:
    """An argparse type: a number (``kind``: int or float) >= ``minimum``; a bad one
    is a one-line usage error."""

    def convert(text: str) -> Any:
        value = kind(text)
        if not (value >= minimum and math.isfinite(value)):  # also refuses nan, inf
            raise argparse.ArgumentTypeError(f"must be >= {minimum:g}, got {text}")
        return value

    convert.__name__ = getattr(kind, "__name__", "number")  # "invalid int value: ..."
    return convert


def above(minimum: float) -> Callable[[str], float]:
    """An argparse type: a number > ``minimum``."""

    def convert(text: str) -> float:
        value = float(text)
        if not (value > minimum and math.isfinite(value)):  # also refuses nan, inf
            raise argparse.ArgumentTypeError(f"must be > {minimum:g}, got {text}")
        return value

    convert.__name__ = "float"
    return convert


def fraction(text: str) -> float:
    """An argparse type: a number within 0..1."""
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be within 0..1, got {text}")
    return value


def bench_config(mailbox_size: int = 1_000, compression: bool = False, shed: bool = True) -> Any:
    """The app config the runtime benchmarks use (``shed``: ``runtime.shed_expired_asks``).

    Compression is off unless asked for: a burst of adds to one agent would
    otherwise measure the compressor (which the compression benchmark measures on
    its own), not the runtime.
    """
    from actormem.actors import AppConfig, CompressionConfig
    from actormem.runtime import RuntimeConfig

    return AppConfig(
        runtime=RuntimeConfig(mailbox_size=mailbox_size, shed_expired_asks=shed),
        compression=CompressionConfig(enabled=compression),
    )


async def child_json(argv: Sequence[str], timeout: float) -> dict[str, float]:
    """Run ``python -m actormem.benchmarks ARGV`` (a measurement in a fresh process)
    and return the JSON object its last line of output holds. Cancelling it (a
    signal stopping the benchmark) kills the process.

    Raises:
        RuntimeError: the process failed (the message holds its last line of stderr).
        TimeoutError: it took longer than ``timeout`` seconds.
    """
    with anyio.fail_after(timeout):
        proc = await anyio.run_process(
            [sys.executable, "-m", "actormem.benchmarks", *argv], check=False
        )
    if proc.returncode != 0:
        tail = (proc.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{' '.join(argv)}: the measuring process failed: {tail}")
    result: dict[str, float] = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    return result


async def wait_processed(rt: Any, count: int, poll: float = 0.0005) -> None:
    """Wait until ``rt`` has handled ``count`` messages in all (a bounded poll), and
    its transport stored their effects (over Redis: the group commits landed)."""
    import anyio

    settled = getattr(getattr(rt, "transport", None), "settled", lambda: True)
    while rt.processed < count or not settled():  # noqa: ASYNC110 (no event)
        await anyio.sleep(poll)


async def timed_adds(
    rt: Any,
    addresses: list[str],
    messages: list[Any],
    poll: float = 0.0005,
    encoding: str | None = None,
) -> float:
    """Tell one ``add`` per message to ``addresses`` in turn; messages/s until all are
    handled (``encoding``: the one the messages' ``tokens`` were counted with)."""
    from actormem.actors.memory.commands import Add

    base = rt.processed
    started = time.perf_counter()
    for i, message in enumerate(messages):
        await rt.tell(addresses[i % len(addresses)], Add(messages=[message], encoding=encoding))
    await wait_processed(rt, base + len(messages), poll)
    return len(messages) / (time.perf_counter() - started)


def machine() -> dict[str, Any]:
    """Where the figures come from."""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
    }


def percentile(samples: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0..100) of ``samples``, by linear interpolation."""
    if not samples:
        return float("nan")
    if len(samples) == 1:
        return samples[0]
    cuts = statistics.quantiles(samples, n=1000, method="inclusive")
    index = min(len(cuts) - 1, max(0, round(p * 10) - 1))
    return cuts[index]


#: Clock ticks per second of the CPU times in /proc/PID/stat.
_TICKS: Final = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu(pid: int | None = None) -> float:
    """CPU seconds (user and system) process ``pid`` has used so far (this process:
    ``time.process_time()``); NaN where another process's cannot be read (not
    Linux, or it is gone)."""
    if pid is None or pid == os.getpid():
        return time.process_time()
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / _TICKS


def rss_bytes() -> int:
    """This process's resident memory now (Linux /proc; 0 elsewhere)."""
    try:
        with open(f"/proc/{os.getpid()}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def message_texts(n: int, chars: int = 200, seed: int = 1) -> list[str]:
    """``n`` distinct chat-like texts of about ``chars`` characters."""
    words = [
        "the",
        "mill",
        "harbour",
        "market",
        "baker",
        "storm",
        "festival",
        "ledger",
        "lantern",
        "bridge",
        "quiet",
        "river",
        "north",
        "south",
        "tomorrow",
        "yesterday",
        "seven",
        "twelve",
        "forty",
        "agreed",
        "decided",
        "alice",
        "bob",
        "carol",
        "price",
        "grain",
        "ferry",
        "bell",
        "tower",
        "rope",
        "cellar",
        "map",
    ]
    out = []
    state = seed
    for i in range(n):
        parts = [f"#{i}"]
        size = 0
        while size < chars:
            state = (state * 1103515245 + 12345) & 0x7FFFFFFF
            word = words[state % len(words)]
            parts.append(word)
            size += len(word) + 1
        out.append(" ".join(parts)[:chars])
    return out


def result_stem(result: BenchResult) -> str:
    """``<name>-<UTC start time>`` (``throughput-20260101T120000Z``): the name of a
    run's files (``.partial`` added for a stopped run)."""
    stamp = datetime.datetime.fromtimestamp(result.started, datetime.UTC)
    return f"{result.name}-{stamp:%Y%m%dT%H%M%SZ}{'.partial' if result.partial else ''}"


def write_result(result: BenchResult, out_dir: Path) -> Path:
    """Write ``result`` to a file of its own in ``out_dir``, ``<stem>.json`` (see
    :func:`result_stem`; ``-2``, ``-3``... added if a run started in the same second
    wrote one), never over an earlier run's; return the path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    data = msgspec.json.format(msgspec.json.encode(result))
    stem = result_stem(result)
    for n in itertools.count(1):
        path = out_dir / (f"{stem}.json" if n == 1 else f"{stem}-{n}.json")
        try:
            with path.open("xb") as file:
                file.write(data)
        except FileExistsError:
            continue
        return path
    raise AssertionError("unreachable")


def read_result(path: Path) -> BenchResult:
    """A result a run wrote (for ``--compare``).

    Raises:
        ValueError: ``path`` cannot be read or holds no benchmark result (the
            message names the file and what was wrong).
    """
    try:
        return msgspec.json.decode(path.read_bytes(), type=BenchResult)
    except OSError as exc:
        raise ValueError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    except msgspec.DecodeError as exc:
        raise ValueError(f"{path}: not a benchmark result: {exc}") from None


class Stopwatch:
    """``with Stopwatch() as sw: ...`` then ``sw.seconds``."""

    def __enter__(self) -> Stopwatch:
        self.start = time.perf_counter()
        self.seconds = 0.0
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.start
