"""The benchmark runner's command line: help and usage errors, no run."""

from __future__ import annotations

import pytest

from actormem.benchmarks.__main__ import BENCHMARKS
from actormem.runtime.cli import main


def test_bench_help_lists_every_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: actormem bench")
    for name in BENCHMARKS:
        assert name in out


def test_bench_name_help_shows_its_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "throughput", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: actormem bench throughput")
    assert "--agents" in out


def test_bench_unknown_name_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert "invalid choice: 'nope'" in err
    assert len(err.splitlines()) == 1
