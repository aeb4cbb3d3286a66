"""What every benchmark smoke test checks of the rows a benchmark reports."""

from __future__ import annotations

from collections.abc import Sequence

from actormem.benchmarks._common import Row


def check_rows(name: str, rows: Sequence[Row]) -> None:
    """Rows were reported, ratios are positive, rates are above zero, and every latency
    percentile sits next to its raw baseline's at the same rate (where the rate is
    below the baseline's peak)."""
    assert rows, f"{name} reported no rows"
    for row in rows:
        if "percentile" in row.extra and not row.extra["over_raw_peak"]:
            assert row.baseline and row.baseline_value, f"{name}: {row.name} has no baseline"
            assert row.ratio == row.value / row.baseline_value
        if row.ratio is not None:
            assert row.ratio > 0, f"{name}: {row.name} has ratio {row.ratio}"
        if row.unit in ("msg/s", "ask/s", "cmd/s"):
            assert row.value > 0, f"{name}: {row.name} is {row.value}"
