"""What every benchmark smoke test checks of the rows a benchmark reports."""

from __future__ import annotations

from collections.abc import Sequence

from actormem.benchmarks._common import Row


def check_rows(name: str, rows: Sequence[Row]) -> None:
    """Rows were reported, ratios are positive and say which way is better, rates are
    above zero, and every latency percentile sits next to its raw baseline's at the
    same rate where the baseline kept up with that rate (and has none elsewhere)."""
    assert rows, f"{name} reported no rows"
    for row in rows:
        if "percentile" in row.extra:
            kept_up = row.extra["raw_sustained"]
            assert bool(row.baseline_value) == kept_up, f"{name}: {row.name}: {row.baseline}"
            if kept_up:
                assert row.baseline_value and row.ratio == row.value / row.baseline_value
        if row.ratio is not None:
            assert row.ratio > 0, f"{name}: {row.name} has ratio {row.ratio}"
            assert row.better in ("higher", "lower"), f"{name}: {row.name}: {row.better}"
        if row.unit in ("msg/s", "ask/s", "cmd/s"):
            assert row.value > 0, f"{name}: {row.name} is {row.value}"
