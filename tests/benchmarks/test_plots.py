"""The ``--plot`` PNGs: every benchmark has a plot, each is drawn from the results it
is given (the run's own and the ``--compare`` ones), and a missing matplotlib is
reported in one line instead of failing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from actormem.benchmarks.__main__ import BENCHMARKS
from actormem.benchmarks._common import BenchResult, Row
from actormem.benchmarks._plots import PLOTS, draw


def _result(name: str, rows: list[Row], started: float = 0.0) -> BenchResult:
    return BenchResult(
        name=name, command=name, rows=rows, machine={}, started=started, elapsed_s=0.0
    )


def _latency_rows(where: str) -> list[Row]:
    return [
        Row(
            name=f"{where} add p{p} at {rate}",
            value=0.1 * p,
            unit="ms",
            baseline="raw",
            baseline_value=0.05 * p,
            ratio=2.0,
            extra={"rate": rate, "percentile": p, "ask": "add", "transport": where},
        )
        for rate in (100.0, 200.0)
        for p in (50, 95, 99)
    ]


def _agents(name: str, values: list[float], unit: str) -> list[Row]:
    return [
        Row(name=f"{name}, {n}", value=v, unit=unit, extra={"agents": n})
        for n, v in zip((1, 10, 100), values, strict=False)
    ]


#: A small result of each benchmark, with the rows its plot draws.
RESULTS = {
    "throughput": _agents("actormem add, in-process", [10.0, 20.0], "msg/s")
    + _agents("raw anyio send", [15.0, 9.0], "msg/s")
    + [Row(name="raw tiktoken encode", value=30.0, unit="msg/s")],
    "redis_throughput": _agents("actormem add over Redis", [5.0, 4.0], "msg/s")
    + _agents("least work for the same adds", [8.0, 7.0], "msg/s")
    + [Row(name="raw redis-py XADD", value=30.0, unit="msg/s")],
    "latency": _latency_rows("in-process"),
    "redis_latency": _latency_rows("Redis"),
    "scale": _agents("actormem idle agent", [900.0, 1_200.0], "B")
    + _agents("raw anyio task", [8_000.0, 9_000.0], "B"),
    "redis_scale": _agents("passivated agent in Redis", [900.0, 800.0], "B"),
    "distributed": [
        Row(name=f"{w} workers", value=100.0 * w, unit="msg/s", extra={"workers": w})
        for w in (1, 2)
    ]
    + [Row(name="raw redis-py", value=300.0, unit="msg/s")],
    "context": [
        Row(name="raw tiktoken", value=100.0, unit="msg/s"),
        Row(name="actormem count", value=90.0, unit="msg/s", baseline="raw", baseline_value=100.0),
        Row(name="context() p50", value=0.2, unit="ms"),
    ],
    "compression": [
        Row(name="tokens saved", value=80.0, unit="%"),
        Row(name="latency p50", value=40.0, unit="ms"),
        Row(name="stall", value=20.0, unit="ms", baseline="idle", baseline_value=2.0, ratio=10.0),
    ],
    "peers": [
        Row(name="Pykka ask", value=1e4, unit="ask/s"),
        Row(name="actormem ask", value=1e6, unit="ask/s", baseline="Pykka", baseline_value=1e4),
    ],
    "retrieval": [
        Row(
            name=f"{method} recall@10",
            value=value,
            unit="",
            extra={
                "method": method,
                "measure": "recall",
                "k": 10,
                "by_category": {"1 single-hop": value / 2, "2 temporal": value},
            },
        )
        for method, value in (("search", 0.7), ("retrieve", 0.7), ("plain BM25", 0.5))
    ]
    + [
        Row(
            name="search p99",
            value=1.0,
            unit="ms",
            baseline="plain BM25",
            baseline_value=2.0,
            ratio=0.5,
        )
    ],
    "simulation": [
        Row(
            name=f"over Redis, pair {pair}",
            value=50.0,
            unit="msg/s",
            baseline=f"in process, pair {pair}",
            baseline_value=100.0,
            ratio=0.5,
        )
        for pair in (1, 2)
    ]
    + [Row(name="pairs that differ", value=0, unit="pairs")],
    "load": [
        Row(name="commands sent", value=20.0, unit="commands"),
        Row(
            name="latency p99",
            value=3.0,
            unit="ms",
            extra={
                "series": [
                    {"t": t, "target_rate": 10.0, "done": 10, "p50_ms": 1.0, "p99_ms": 3.0}
                    for t in range(2)
                ]
            },
        ),
    ],
}


def test_every_benchmark_has_a_plot() -> None:
    assert sorted(PLOTS) == sorted(BENCHMARKS) == sorted(RESULTS)


#: One benchmark per plot (related benchmarks share one).
ONE_EACH = sorted({plot: name for name, plot in sorted(PLOTS.items())}.values())


@pytest.mark.parametrize("name", ONE_EACH)
def test_each_plot_writes_a_png_of_the_results_it_is_given(name: str, tmp_path: Path) -> None:
    path = tmp_path / f"{name}-20260101T000000Z.png"
    current = _result(name, RESULTS[name], started=1.0)
    earlier = _result(name, RESULTS[name], started=0.0)  # the same benchmark, told apart
    assert draw(current, [earlier], path) == [path]
    assert path.read_bytes().startswith(b"\x89PNG")
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_a_plot_combines_the_compared_results_of_related_benchmarks(tmp_path: Path) -> None:
    local = _result("throughput", RESULTS["throughput"])
    redis = _result("redis_throughput", RESULTS["redis_throughput"])
    latency = _result("latency", RESULTS["latency"])  # not on a throughput plot: left out
    path = tmp_path / "throughput.png"
    assert draw(local, [redis, latency], path) == [path]
    assert path.read_bytes().startswith(b"\x89PNG")


def test_missing_matplotlib_is_reported_not_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    assert draw(_result("throughput", []), [], tmp_path / "t.png") == []
    assert "plots need matplotlib" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
