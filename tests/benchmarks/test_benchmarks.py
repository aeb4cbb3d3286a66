"""The in-process benchmarks run end to end at tiny sizes (no timing is asserted:
tests never do), and every benchmark refuses a bad option with one line."""

from __future__ import annotations

import importlib
import subprocess
import sys

import anyio
import pytest

from actormem.actors import MemoryRuntime
from actormem.benchmarks.__main__ import build_parser
from actormem.benchmarks._common import bench_config
from actormem.benchmarks.latency import SUSTAINED, Baseline, measure, open_loop
from tests.benchmarks.helpers import check_rows

pytestmark = pytest.mark.anyio

TINY = {
    "throughput": ["--messages", "200", "--agents", "1", "20"],
    "latency": ["--agents", "3", "--seconds", "0.2", "--concurrency", "4"],
    "scale": ["--agents", "50"],
    "context": ["--messages", "300", "--calls", "20", "--budget", "500"],
    "compression": ["--conversations", "2", "--messages", "60", "--max-tokens", "500"],
    "load": ["--agents", "5", "--rate", "200", "--duration", "1", "--quiet", "--timeout", "5"],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TINY))
async def test_benchmark_runs_at_tiny_size(name: str) -> None:
    args = build_parser().parse_args([name, *TINY[name]])
    check_rows(name, await importlib.import_module(f"actormem.benchmarks.{name}").run(args))


async def test_load_with_max_inflight_reports_what_it_did_not_send() -> None:
    # With at most one ask in flight, commands that fall due while it waits are
    # counted as not sent; how many depends on scheduling, so only the accounting
    # is checked: a row for them, and nothing sent failed.
    argv = ["load", "--agents", "2", "--rate", "5000", "--duration", "0.5", "--quiet"]
    args = build_parser().parse_args([*argv, "--max-inflight", "1", "--mix", "1"])
    rows = await importlib.import_module("actormem.benchmarks.load").run(args)
    figures = {row.name: row.value for row in rows}
    assert figures["commands sent (in-process)"] >= 1
    assert figures["not sent: --max-inflight asks already waiting"] >= 0
    assert figures["errors"] == 0


@pytest.mark.slow
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["load", "--rate", "-5"], "argument --rate: must be > 0, got -5"),
        (["load", "--rate", "inf"], "argument --rate: must be > 0, got inf"),
        (["load", "--timeout", "0"], "argument --timeout: must be > 0, got 0"),
        (["load", "--max-inflight", "-1"], "argument --max-inflight: must be >= 0, got -1"),
        (["load", "--mix", "1.5"], "argument --mix: must be within 0..1, got 1.5"),
        (["load", "--workers", "-1"], "argument --workers: must be >= 0, got -1"),
        (["throughput", "--agents", "0"], "argument --agents: must be >= 1, got 0"),
        (["distributed", "--workers", "0"], "argument --workers: must be >= 1, got 0"),
        (["redis_throughput", "--repeat", "0"], "argument --repeat: must be >= 1, got 0"),
        (["redis_latency", "--fixed-rate", "-1"], "argument --fixed-rate: must be >= 0, got -1"),
        (["scale", "--agents", "x"], "argument --agents: invalid int value: 'x'"),
    ],
)
def test_a_bad_option_is_one_line_and_exit_status_2(argv: list[str], message: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "actormem.benchmarks", *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    [line] = proc.stderr.splitlines()
    assert message in line


async def test_an_open_loop_level_that_is_not_kept_up_with_says_so() -> None:
    lock = anyio.Lock()

    async def serial(_: int) -> object:  # 100 asks/s at most, one at a time
        async with lock:
            await anyio.sleep(0.01)
        return None

    level = await open_loop(serial, rate=1_000, seconds=0.05)
    assert len(level.samples) == 50
    assert level.answered < SUSTAINED * 1_000


@pytest.mark.slow
async def test_a_baseline_that_cannot_keep_up_gives_no_ratio() -> None:
    async def serial(_: int) -> object:
        await anyio.sleep(0.01)
        return None

    argv = ["latency", "--agents", "2", "--seconds", "0.1", "--concurrency", "2"]
    args = build_parser().parse_args(argv)
    async with MemoryRuntime(bench_config()) as rt:
        rows = await measure(rt, "in-process", args, Baseline("slow", serial))
    check_rows("latency", rows)
    percentiles = [row for row in rows if "percentile" in row.extra]
    assert len(percentiles) == 12
    assert all(row.ratio is None and not row.extra["raw_sustained"] for row in percentiles)
    explained = [row.name for row in rows if row.name.startswith("slow at")]
    assert len(explained) == 4 and all(
        name.endswith("too few, so no baseline") for name in explained
    )


def test_the_gc_rows_count_each_levels_collections_per_10000_asks_by_process() -> None:
    from actormem.benchmarks._common import Recorder, recording, step, steps_so_far
    from actormem.benchmarks.redis_latency import gc_rows
    from actormem.runtime.collector import Collection, Collections

    with recording(Recorder()):
        step("context(): peak")
        assert [label for _, label in steps_so_far()] == ["context(): peak"]
    steps = [
        (100.0, "context(): peak"),
        (103.0, "context() at 5,000/s (5,000/s): raw redis-py round trip"),
        (106.0, "context() at 5,000/s (5,000/s): actormem"),
        (109.5, "add at 90% of peak (2,000/s): raw redis-py round trip"),  # skipped: too short
        (109.6, "add at 90% of peak (2,000/s): actormem"),
    ]
    here, worker, responder = Collections(), Collections(), Collections()
    here.collections = [
        Collection(101.0, 1, 0.5, 0),  # during the peak: no level
        Collection(104.0, 0, 0.001, 3),  # the raw asker's
        Collection(107.0, 0, 0.002, 0),
        Collection(108.0, 1, 0.004, 7),
        Collection(110.0, 2, 0.010, 1),
    ]
    worker.collections = [Collection(107.5, 0, 0.003, 2)]
    rows = gc_rows(
        steps,
        113.0,
        3.0,
        {"client": here, "worker": worker, "raw asker": here, "raw responder": responder},
    )
    by = {(row.extra["level"], row.extra["process"]): row for row in rows}
    assert set(by) == {
        ("context() at 5,000/s", "raw asker"),
        ("context() at 5,000/s", "raw responder"),
        ("context() at 5,000/s", "client"),
        ("context() at 5,000/s", "worker"),
        ("add at 90% of peak", "client"),
        ("add at 90% of peak", "worker"),
    }
    client = by["context() at 5,000/s", "client"]  # 15,000 asks offered
    assert client.value == pytest.approx(6.0 * 10_000 / 15_000)
    assert client.extra["collections_per_10k"] == pytest.approx([1 / 1.5, 1 / 1.5, 0])
    assert client.extra["longest_ms"] == pytest.approx(4.0)
    assert client.extra["collected_per_10k"] == pytest.approx(7 / 1.5)
    assert by["context() at 5,000/s", "raw asker"].value == pytest.approx(1.0 / 1.5)
    assert by["context() at 5,000/s", "raw responder"].value == 0
    assert by["add at 90% of peak", "client"].extra["collections_per_10k"] == pytest.approx(
        [0, 0, 10_000 / 6_000]
    )
