"""The ``--plot`` PNGs are written from results, combined across related benchmarks,
and a missing matplotlib is reported in one line instead of failing the run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from actormem.benchmarks._common import BenchResult, Row, write_result
from actormem.benchmarks._plots import distributed_plot, latency_plot, memory_plot, throughput_plot


def _result(name: str, rows: list[Row]) -> BenchResult:
    return BenchResult(name=name, command=name, rows=rows, machine={}, started=0.0, elapsed_s=0.0)


def _latency_rows(where: str) -> list[Row]:
    return [
        Row(
            name=f"{where} add p{p} at {rate}",
            value=0.1 * p,
            unit="ms",
            extra={"rate": rate, "percentile": p, "ask": "add", "transport": where},
        )
        for rate in (100.0, 200.0)
        for p in (50, 95, 99)
    ]


def test_each_plot_writes_a_png_combining_related_results(tmp_path: Path) -> None:
    local = _result(
        "throughput",
        [
            Row(
                name="actormem add, in-process, 1 agents",
                value=10.0,
                unit="msg/s",
                extra={"agents": 1},
            ),
            Row(
                name="actormem add, in-process, 9 agents",
                value=20.0,
                unit="msg/s",
                extra={"agents": 9},
            ),
        ],
    )
    write_result(local, tmp_path)
    redis = _result(
        "redis_throughput",
        [
            Row(name="raw redis-py XADD", value=30.0, unit="msg/s"),
            Row(name="actormem add over Redis, 1", value=5.0, unit="msg/s", extra={"agents": 1}),
        ],
    )
    write_result(_result("latency", _latency_rows("in-process")), tmp_path)
    scale = _result(
        "redis_scale",
        [Row(name="passivated agent in Redis, 10", value=900.0, unit="B", extra={"agents": 10})],
    )
    dist = _result(
        "distributed",
        [
            Row(name=f"{w} workers", value=100.0 * w, unit="msg/s", extra={"workers": w})
            for w in (1, 2)
        ],
    )
    written = [
        *throughput_plot(redis, tmp_path),
        *latency_plot(_result("redis_latency", _latency_rows("Redis")), tmp_path),
        *memory_plot(scale, tmp_path),
        *distributed_plot(dist, tmp_path),
    ]
    assert [p.name for p in written] == [
        "throughput.png",
        "latency.png",
        "memory.png",
        "distributed.png",
    ]
    for path in written:
        assert path.read_bytes().startswith(b"\x89PNG")


def test_missing_matplotlib_is_reported_not_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    assert throughput_plot(_result("throughput", []), tmp_path) == []
    assert "plots need matplotlib" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
