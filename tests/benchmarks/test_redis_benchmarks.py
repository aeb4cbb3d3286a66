"""Smoke tests: every Redis benchmark runs end to end at tiny sizes and reports
its rows with positive figures (no timing is asserted: tests never do)."""

from __future__ import annotations

import importlib

import pytest

from actormem.benchmarks.__main__ import build_parser
from actormem.benchmarks._common import Recorder, recording
from tests.benchmarks.helpers import check_rows

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TINY = {
    "redis_throughput": ["--messages", "60", "--agents", "5", "--repeat", "2"],
    "redis_latency": [
        "--agents",
        "3",
        "--seconds",
        "0.2",
        "--concurrency",
        "4",
        "--fixed-rate",
        "50",
    ],
    "distributed": ["--messages", "60", "--agents", "5", "--workers", "1"],
    "simulation": ["--agents", "3", "--steps", "2", "--runs", "2"],
    "redis_scale": ["--agents", "20", "--activations", "3", "--rounds", "1", "--churn", "5"],
    "load": [
        "--transport",
        "redis",
        "--workers",
        "1",
        "--agents",
        "5",
        "--rate",
        "50",
        "--duration",
        "1.5",
        "--quiet",
    ],
}


@pytest.mark.parametrize("name", sorted(TINY))
async def test_benchmark_runs_at_tiny_size(name: str) -> None:
    args = build_parser().parse_args([name, *TINY[name]])
    rows = await importlib.import_module(f"actormem.benchmarks.{name}").run(args)
    check_rows(name, rows)
    measured = [row for row in rows if row.unit in ("msg/s", "ask/s", "cmd/s", "ms", "us", "B")]
    assert measured, f"{name} reported no measured figure"
    if name == "redis_throughput":  # --repeat 2: two (baseline, actormem) pairs per count
        floor, ours = rows[1:]
        assert floor.name.startswith("least work for the same adds")
        assert len(floor.extra["runs"]) == 2 and floor.ratio
        runs = ours.extra["runs"]
        assert len(runs) == 2
        assert ours.value == (runs[0]["actormem"] + runs[1]["actormem"]) / 2
        assert all(run["cpu_us_per_add"] > 0 for run in runs)
    if name == "simulation":  # --runs 2: each pair, their mean, and the runs' agreement
        first, second, both, differ = rows
        assert (first.extra["first"], second.extra["first"]) == ("local", "redis")
        assert first.extra["local"]["messages_processed"] > 0
        assert both.value == (first.value + second.value) / 2
        assert differ.value == 0 and differ.extra["pairs"] == []


async def test_simulation_at_several_sizes_runs_each_in_process_and_over_workers() -> None:
    argv = ["simulation", "--agents", "6", "12", "--steps", "7", "--workers", "1"]
    rows = await importlib.import_module("actormem.benchmarks.simulation").run(
        build_parser().parse_args(argv)
    )
    check_rows("simulation", rows)
    names = [row.name for row in rows]
    assert names == [
        "simulation, 6 agents, in process",
        "simulation, 6 agents, over Redis, 1 worker",
        "simulation, 6 agents: over Redis, 1 worker",
        "simulation, 12 agents, in process",
        "simulation, 12 agents, over Redis, 1 worker",
        "simulation, 12 agents: over Redis, 1 worker",
        "deliveries per share, largest over smallest of the sizes (in process)",
    ]
    for run in (rows[0], rows[1], rows[3], rows[4]):
        extra = run.extra
        assert extra["exit_code"] == 0, extra["error"]
        assert extra["steps_completed"] == 7
        assert extra["peak_rss_mb"] > 10
        # The town shares through feeds: at most 5 a step to each agent.
        assert 0 < extra["insights_delivered"] <= 5 * 2 * extra["agents"]
        assert extra["deliveries_per_share"] > 0
    assert rows[2].ratio == rows[1].value / rows[0].value
    assert set(rows[6].extra["per_share"]) == {"6", "12"}


async def test_the_redis_benchmarks_send_adds_counted_by_the_sender() -> None:
    from actormem.benchmarks._redis import sender_adds
    from actormem.runtime import get_counter

    (add,) = sender_adds(["the vault code is 4821"])
    counter = get_counter()
    assert add.encoding == counter.encoding
    assert add.messages[0].tokens == counter.count_message(add.messages[0].to_openai())


async def test_redis_latency_reports_the_stages_of_the_asks_with_trace() -> None:
    args = build_parser().parse_args(["redis_latency", *TINY["redis_latency"], "--trace"])
    rows = await importlib.import_module("actormem.benchmarks.redis_latency").run(args)
    check_rows("redis_latency", rows)
    stages = [row for row in rows if "span" in row.extra]
    # Every level of both asks; the worker's stages came from its process's file.
    levels = {row.extra["level"] for row in stages}
    assert levels == {
        f"{ask} at {level}"
        for ask in ("context()", "add")
        for level in ("50% of peak", "90% of peak", "50/s")
    }
    spans = {(row.extra["level"], row.extra["span"]) for row in stages}
    assert ("add at 50/s", "commit call") in spans
    assert ("context() at 50/s", "worker reply outbox") in spans
    assert ("context() at 50/s", "handler") in spans
    assert ("add at 50/s", "worker event loop late") in spans
    assert any(row.name == "Redis add at 50/s: commands per commit call (mean)" for row in rows)
    # Each level's CPU per answered ask of the three processes, beside the raw ones'.
    cpu = {row.name: row for row in rows if " CPU per ask " in row.name}
    assert {name.split(" CPU per ask ")[1].removesuffix(" (over capacity)") for name in cpu} == {
        "at 50% of peak",
        "at 90% of peak",
        "at 50/s",
    }
    for row in cpu.values():
        assert set(row.extra["by_process"]) == {"client", "worker", "redis-server"}
        assert row.value == pytest.approx(sum(row.extra["by_process"].values()))
        assert row.value > 0
        if row.baseline_value is not None:
            assert set(row.extra["baseline_by_process"]) == {"asker", "responder", "redis-server"}


async def test_redis_latency_reports_the_collections_of_each_process_with_gc() -> None:
    args = build_parser().parse_args(["redis_latency", *TINY["redis_latency"], "--gc"])
    with recording(Recorder()):
        rows = await importlib.import_module("actormem.benchmarks.redis_latency").run(args)
    check_rows("redis_latency", rows)
    paused = [row for row in rows if row.name.endswith(" gc pause per 10,000 asks")]
    levels = {
        f"{ask} at {level}"
        for ask in ("context()", "add")
        for level in ("50% of peak", "90% of peak", "50/s")
    }
    found = {(row.extra["level"], row.extra["process"]) for row in paused}
    # Every level of both asks has the client's and the worker's (whose record came
    # from its file, written as it exited).
    assert {(level, p) for level, p in found if p in ("client", "worker")} == {
        (level, process) for level in levels for process in ("client", "worker")
    }
    # The baseline's levels that ran (one above the raw round trip's peak on a loaded
    # machine is skipped) have the raw asker's and the raw responder's, the responder's
    # from its file too.
    raw = {(level, p) for level, p in found if p not in ("client", "worker")}
    assert raw, "no level of the raw baseline has its collections"
    assert {level for level, _ in raw} <= levels
    assert {p for _, p in raw} == {"raw asker", "raw responder"}
    for level in {level for level, _ in raw}:
        assert {(level, "raw asker"), (level, "raw responder")} <= raw
    for row in paused:
        assert len(row.extra["collections_per_10k"]) == 3
        assert row.value >= 0 and row.extra["longest_ms"] >= 0
