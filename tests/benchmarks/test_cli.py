"""The benchmark runner's command line: help, usage errors, the file each run
writes, its plots (or the line saying there are none), and the result table."""

from __future__ import annotations

import argparse
import importlib
import io
import sys
from pathlib import Path

import pytest
from rich.console import Console

from actormem.benchmarks import _plots
from actormem.benchmarks.__main__ import BENCHMARKS, build_parser, print_result, summary
from actormem.benchmarks.__main__ import main as bench
from actormem.benchmarks._common import BenchResult, Row, read_result, write_result
from actormem.runtime.cli import main

#: A context run small enough for a test (a second or so).
TINY_CONTEXT = ["context", "--messages", "50", "--calls", "5", "--budget", "200", "--quiet"]


def _words(text: str) -> str:
    return " ".join(text.split())


def test_bench_help_lists_every_benchmark_with_its_summary(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["bench", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: actormem bench")
    assert "python -m" not in out
    for name in BENCHMARKS:
        line = summary(importlib.import_module(f"actormem.benchmarks.{name}"))
        assert line.endswith(".") and len(line) < 100, line
        assert _words(f"{name} {line}") in _words(out)


@pytest.mark.parametrize("name", BENCHMARKS)
def test_each_benchmark_help_shows_every_default(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", name, "--help"]) == 0
    out = _words(capsys.readouterr().out)
    assert out.startswith(f"usage: actormem bench {name} ")
    assert "python -m" not in out
    sub = next(
        a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)
    ).choices[name]
    for action in sub._actions:
        default = action.default
        if action.help == argparse.SUPPRESS or default in (None, [], argparse.SUPPRESS):
            continue
        if default is False:  # a flag
            continue
        shown = " ".join(map(str, default)) if isinstance(default, list) else str(default)
        assert f"(default: {shown})" in out, f"{name} {action.option_strings}"


def test_bench_unknown_name_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert "invalid choice: 'nope'" in err
    assert len(err.splitlines()) == 1


def test_each_run_writes_a_file_of_its_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    earlier = tmp_path / "context-20200101T000000Z.json"
    earlier.write_text("{}")
    assert bench([*TINY_CONTEXT, "--out", str(tmp_path)]) == 0
    assert bench([*TINY_CONTEXT, "--out", str(tmp_path)]) == 0
    written = sorted(p for p in tmp_path.iterdir() if p != earlier)
    assert len(written) == 2 and all(p.name.startswith("context-2") for p in written)
    assert [read_result(p).name for p in written] == ["context", "context"]
    assert earlier.read_text() == "{}"
    out = capsys.readouterr().out
    printed = {line.split()[-1] for line in out.splitlines() if "written:" in line}
    assert printed == {str(p) for p in written}


def test_plots_are_drawn_from_this_run_and_the_compared_files_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    drawn: list[tuple[list[BenchResult], Path]] = []

    def plot(results: list[BenchResult], path: Path) -> list[Path]:
        drawn.append((results, path))
        return [path]

    monkeypatch.setitem(_plots.PLOTS, "context", plot)
    older = tmp_path / "older"
    assert bench([*TINY_CONTEXT, "--out", str(older)]) == 0
    [compared] = older.iterdir()  # lies elsewhere: only --compare brings it in
    out = tmp_path / "out"
    (out).mkdir()
    (out / "context-20200101T000000Z.json").write_bytes(compared.read_bytes())
    assert bench([*TINY_CONTEXT, "--out", str(out), "--plot"]) == 0
    assert bench([*TINY_CONTEXT, "--out", str(out), "--compare", str(compared)]) == 0
    (alone, first), (both, second) = drawn
    assert [r.command for r in alone] == [
        f"actormem bench {' '.join(TINY_CONTEXT)} --out {out} --plot"
    ]
    assert len(both) == 2 and both[1] == read_result(compared)
    for path in (first, second):
        assert path.suffix == ".png" and path.with_suffix(".json").exists()
    printed = capsys.readouterr().out
    assert f"plot: {first}" in printed and f"plot: {second}" in printed


def test_a_benchmark_without_a_plot_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delitem(_plots.PLOTS, "context")
    assert bench([*TINY_CONTEXT, "--out", str(tmp_path), "--plot"]) == 0
    out = capsys.readouterr().out
    assert "no plots: context has none" in out
    assert not list(tmp_path.glob("*.png"))


def test_a_stopped_run_says_it_has_no_plots(capsys: pytest.CaptureFixture[str]) -> None:
    from actormem.benchmarks.__main__ import _plot

    result = BenchResult(
        name="context", command="c", rows=[], machine={}, started=0.0, elapsed_s=0.0, partial=True
    )
    console = Console(file=io.StringIO(), width=200)
    _plot(result, [], Path("unused.png"), console)
    assert console.file.getvalue() == "no plots: the run was stopped before it finished\n"  # type: ignore[attr-defined]


def test_plot_without_matplotlib_is_one_line_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed
    assert bench([*TINY_CONTEXT, "--out", str(tmp_path / "out"), "--plot"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and not (tmp_path / "out").exists()
    assert captured.err == (
        "actormem bench context: error: needs the plots extra (no module named "
        "'matplotlib'): pip install 'actormem[plots]'\n"
    )


def test_compare_with_a_file_that_is_no_result_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "bad.json").write_text('{"name": 1}')
    other = BenchResult(name="latency", command="c", rows=[], machine={}, started=0, elapsed_s=0)
    write_result(other, tmp_path)
    [latency] = [p.name for p in tmp_path.glob("latency-*.json")]
    for given, why in (
        ("nope.json", "cannot read it"),
        ("bad.json", "not a benchmark result"),
        (latency, "a latency result, not drawn on a context plot"),
    ):
        argv = [*TINY_CONTEXT, "--out", str(tmp_path / "out"), "--compare", str(tmp_path / given)]
        assert bench(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith(
            f"actormem bench context: error: --compare: {tmp_path / given}: {why}"
        )
        assert err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_the_table_says_which_way_is_better_and_shows_baseline_units() -> None:
    rows = [
        Row(name="adds", value=2.0, unit="msg/s", baseline="raw", baseline_value=4.0, ratio=0.5),
        Row(name="p50", value=0.003, unit="ms", baseline="raw", baseline_value=1.0, ratio=0.003),
        Row(name="count", value=3, unit="asks"),
    ]
    result = BenchResult(name="x", command="x", rows=rows, machine={}, started=0, elapsed_s=0)
    console = Console(file=io.StringIO(), width=200)
    print_result(result, console)
    lines = console.file.getvalue().splitlines()  # type: ignore[attr-defined]
    [header] = [line for line in lines if "measure" in line]
    assert _words(header).split("┃")[1:-1] == [
        " measure ",
        " value ",
        " baseline ",
        " ratio ",
        " better ",
        " target ",
    ]
    [adds] = [line for line in lines if "adds" in line]
    assert _words(adds).split("│")[1:-1] == [
        " adds ",
        " 2 msg/s ",
        " 4 msg/s (raw) ",
        " 0.50x ",
        " higher ",
        " ",
    ]
    [p50] = [line for line in lines if "p50" in line]
    assert "1 ms (raw)" in p50 and "0.003x" in p50 and "lower" in p50
